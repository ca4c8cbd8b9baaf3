#pragma once
// `retort distill run`: the whole off-policy distillation experiment in one command. Trains the teacher (the
// teacher.* shape and budget, on the student's data) unless distill.teacher already holds a finished one, writes
// its top-k cache, trains the student with KD from the cache and, with the same steps, batch and optimizer, the
// same student on the labels only; evaluates teacher and both students on the held-out split; writes
// results.json and loss_curves.svg into run.dir and returns the figures.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/train/evaluation.h"

namespace retort::distill {

struct StudentOutcome {
  std::string name;
  std::filesystem::path run_dir;
  EvalReport eval;
  double train_seconds = 0;
  std::vector<std::pair<double, double>> train_ce;   // (step, cross-entropy on the batch's labels)
  std::vector<std::pair<double, double>> eval_loss;  // (step, validation loss)
};

struct DistillRunReport {
  std::filesystem::path run_dir;
  std::filesystem::path teacher_dir;
  bool teacher_trained = false;  // false: an existing teacher was loaded
  EvalReport teacher;
  double teacher_seconds = 0;
  double cache_seconds = 0;
  int64_t cache_tokens = 0;
  double cache_bytes_per_token = 0;
  StudentOutcome kd, labels;
  double total_seconds = 0;
};

DistillRunReport run_distillation_pipeline(const ResolvedConfig& config, Device device);

// The comparison table printed at the end of the run.
std::string format_report_table(const DistillRunReport& report);

}  // namespace retort::distill
