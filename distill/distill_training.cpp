#include "distill/distill_training.h"

#include <memory>

#include "distill/distill_config.h"
#include "distill/objectives/cache_objective.h"
#include "distill/objectives/interleaved_policy_objective.h"
#include "distill/objectives/on_policy_objective.h"
#include "distill/objectives/online_objective.h"
#include "distill/objectives/xtoken_objective.h"

namespace retort::distill {

namespace {

// The objective of distill.mode on the data's batches (the off-policy one).
std::unique_ptr<TrainingObjective> off_policy_objective(const ResolvedConfig& config) {
  if (distill_mode_from(config) == DistillMode::kOnline) return std::make_unique<OnlineDistillationObjective>();
  return std::make_unique<CacheDistillationObjective>();
}

}  // namespace

TrainResult run_distill_training(const ResolvedConfig& config, Device device, RunStart start) {
  if (cross_tokenizer(config)) {  // either teacher signal (distill.mode) over the teacher's own tokens
    CrossTokenizerObjective xtoken;
    return run_training(config, device, start, xtoken);
  }
  // distill.on_policy_ratio: 1 on-policy only (nothing of distill.mode is used), between 0 and 1 interleaved, 0 the
  // off-policy objective alone, exactly as without the key.
  const double on_policy_ratio = config.get_double("distill.on_policy_ratio");
  if (on_policy_ratio >= 1) {
    OnPolicyDistillationObjective on_policy;
    return run_training(config, device, start, on_policy);
  }
  if (on_policy_ratio > 0) {
    InterleavedPolicyObjective interleaved(off_policy_objective(config), on_policy_ratio);
    return run_training(config, device, start, interleaved);
  }
  const std::unique_ptr<TrainingObjective> off_policy = off_policy_objective(config);
  return run_training(config, device, start, *off_policy);
}

}  // namespace retort::distill
