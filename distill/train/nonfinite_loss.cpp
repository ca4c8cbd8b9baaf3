#include "distill/train/nonfinite_loss.h"

#include <fmt/format.h>

#include <cmath>

namespace retort::distill {

double NonFiniteLossPolicy::observe(double value, int64_t step) const {
  return step == inject_nan_at_step ? injected_loss : value;
}

Error NonFiniteLossPolicy::stop(double value, int64_t step, int64_t micro,
                                const std::optional<std::filesystem::path>& last_checkpoint) const {
  return Error(
      fmt::format("training loss is {} at step {} (micro-batch {}): stopping without saving this step. The last good "
                  "checkpoint is {}. Lower optim.lr, raise optim.warmup_steps or keep optim.grad_clip on, then resume "
                  "with --resume",
                  value, step + 1, micro, last_checkpoint ? last_checkpoint->string() : std::string("(none yet)")));
}

}  // namespace retort::distill
