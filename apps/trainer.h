#pragma once
// `retort train`: the toy GPT trained end to end from a resolved config. Data preparation (tokenizer and
// shards, cached), AdamW or REKLS (optim.name) with warmup + decay, clipping, gradient accumulation, periodic
// validation, checkpoints with exact resume, progress on the terminal and metrics.jsonl in the run directory.
#include <filesystem>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"

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

TrainResult run_training(const ResolvedConfig& config, Device device, bool resume);

}  // namespace retort::apps
