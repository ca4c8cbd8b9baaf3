#pragma once
// `retort distill train`: a student (every `retort train` key describes it and its data) distilled per distill.*
// on the one training loop (train/training_loop.h), with the objective of distill.mode: the teacher's top-k cache
// (objectives/cache_objective.h) or an online teacher (objectives/online_objective.h); with distill.xtoken.enabled a
// teacher of another tokenizer, through either signal (objectives/xtoken_objective.h).
#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/train/training_loop.h"

namespace retort::distill {

TrainResult run_distill_training(const ResolvedConfig& config, Device device, RunStart start);
inline TrainResult run_distill_training(const ResolvedConfig& config, Device device, bool resume) {
  return run_distill_training(config, device, resume ? RunStart::kResume : RunStart::kNew);
}

}  // namespace retort::distill
