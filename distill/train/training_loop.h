#pragma once
// The training run every model of retort goes through, a teacher, a distilled student or a plain GPT: data
// preparation (tokenizer and shards, cached), the model at any dp x tp, the optimizer of optim.name with warmup and
// decay, clipping, gradient accumulation, periodic validation, checkpoints with exact resume, progress on the
// terminal and metrics.jsonl in the run directory. What the model learns from is the objective's business
// (objective.h): the labels for a run without a teacher, a teacher's distribution for a student.
#include <filesystem>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/train/objective.h"
#include "distill/train/run_folder.h"

namespace retort::distill {

struct TrainResult {
  std::filesystem::path run_dir;
  int64_t steps = 0;
  std::vector<double> train_losses;  // one per step run in this call
  double final_eval_loss = 0;        // NaN without a validation split (data.val_fraction 0, data.shards alone)
  double unigram_entropy = 0;        // nats/token of the training tokens: the loss of the best context-free model
  double tokens_per_second = 0;
  bool main_rank = true;  // world rank 0: the one that reports
};

// Trains the model of `config` (training_schema() keys) toward `objective`. `start` applies the run-folder rule
// (run_folder.h) to run.dir before anything else: a new run refuses a folder that holds one, kResume continues
// from its latest checkpoint (a folder without one is an InputError, as torchtune and NeMo refuse to resume
// nothing), kOverwrite deletes the earlier run's outputs first.
TrainResult run_training(const ResolvedConfig& config, Device device, RunStart start, TrainingObjective& objective);
inline TrainResult run_training(const ResolvedConfig& config, Device device, bool resume,
                                TrainingObjective& objective) {
  return run_training(config, device, resume ? RunStart::kResume : RunStart::kNew, objective);
}

// The run without a teacher: `retort train`.
TrainResult run_label_training(const ResolvedConfig& config, Device device, RunStart start);
inline TrainResult run_label_training(const ResolvedConfig& config, Device device, bool resume) {
  return run_label_training(config, device, resume ? RunStart::kResume : RunStart::kNew);
}

}  // namespace retort::distill
