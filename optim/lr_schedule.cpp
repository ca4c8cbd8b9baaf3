#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/util/error.h"

namespace retort::optim {

void LrSchedule::validate() const {
  RETORT_INPUT_CHECK(kind == "constant" || kind == "cosine" || kind == "linear",
                     "optim.schedule must be constant, cosine or linear, got '{}'", kind);
  RETORT_INPUT_CHECK(peak_lr > 0, "optim.lr must be positive, got {}", peak_lr);
  RETORT_INPUT_CHECK(min_lr >= 0 && min_lr <= peak_lr, "optim.min_lr must lie in [0, optim.lr], got {}", min_lr);
  RETORT_INPUT_CHECK(warmup_steps >= 0, "optim.warmup_steps must not be negative, got {}", warmup_steps);
}

double LrSchedule::at(int64_t step) const {
  // Warmup reaches the peak at the end of step warmup_steps - 1 (step 0 already trains).
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return peak_lr;
  const double span = std::max<double>(1.0, static_cast<double>(total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  const double decay = kind == "cosine" ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return min_lr + (peak_lr - min_lr) * decay;
}

}  // namespace retort::optim
