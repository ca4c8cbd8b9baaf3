#pragma once
// `retort train`: the toy GPT trained end to end from a resolved config. Data preparation (tokenizer and
// shards, cached), AdamW or REKLS (optim.name) with warmup + decay, clipping, gradient accumulation, periodic
// validation, checkpoints with exact resume, progress on the terminal and metrics.jsonl in the run directory.
// Distillation reuses the loop through TrainingHooks: its loss replaces the labels' cross-entropy.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/tensor/device.h"
#include "core/tensor/tensor.h"
#include "parallel/comm/communicator.h"

namespace retort::apps {

struct TrainResult {
  std::filesystem::path run_dir;
  int64_t steps = 0;
  std::vector<double> train_losses;  // one per step run in this call
  double final_eval_loss = 0;
  double unigram_entropy = 0;  // nats/token of the training tokens: the loss of the best context-free model
  double tokens_per_second = 0;
  bool main_rank = true;  // world rank 0: the one that reports
};

// The loss of one micro-batch, as a training objective other than the labels' cross-entropy (distillation)
// computes it.
struct MicroBatchLoss {
  Tensor loss;  // 0-dim, on the tape: backward() of it (scaled by 1 / grad_accum) gives the gradients
  // Side values reported in metrics.jsonl, averaged over the step's micro-batches and the dp ranks (e.g. "ce").
  std::map<std::string, double> metrics;
};

// What the loss sees of the run it is part of.
struct LossContext {
  Device device;
  DType dtype;                                     // the model's compute dtype
  std::shared_ptr<Communicator> tp_group;          // null without tensor parallelism
  const ResolvedConfig* config = nullptr;          // the run's config
  const data::PreparedDataset* dataset = nullptr;  // the prepared data (tokenizer, shards)
};

// student logits [B, T, V_local] (vocab-split over the tp group) of `batch`'s inputs -> the micro-batch loss.
using MicroBatchLossFn = std::function<MicroBatchLoss(const Tensor& logits, const data::TokenBatch& batch)>;
// Called once the run's data and process grid exist, before the first step: builds the loss of the run.
using LossFactory = std::function<MicroBatchLossFn(const LossContext& context)>;

struct TrainingHooks {
  LossFactory loss;  // empty: the cross-entropy of the loss.* keys
  std::string progress_label = "train";
};

TrainResult run_training(const ResolvedConfig& config, Device device, bool resume, const TrainingHooks& hooks = {});

}  // namespace retort::apps
