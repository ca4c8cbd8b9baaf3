#include "distill/distill_training.h"

#include "distill/distill_config.h"
#include "distill/objectives/cache_objective.h"
#include "distill/objectives/online_objective.h"
#include "distill/objectives/xtoken_objective.h"

namespace retort::distill {

TrainResult run_distill_training(const ResolvedConfig& config, Device device, RunStart start) {
  if (cross_tokenizer(config)) {  // either teacher signal (distill.mode) over the teacher's own tokens
    CrossTokenizerObjective xtoken;
    return run_training(config, device, start, xtoken);
  }
  if (distill_mode_from(config) == DistillMode::kOnline) {
    OnlineDistillationObjective online;
    return run_training(config, device, start, online);
  }
  CacheDistillationObjective cache;
  return run_training(config, device, start, cache);
}

}  // namespace retort::distill
