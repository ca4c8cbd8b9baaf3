#pragma once
// What a run does when its loss stops being a number: it stops before the optimizer step, saves nothing of the
// bad step, and says which checkpoint to resume from and what to change. NaN and +-inf are treated alike: either
// one in a loss poisons every gradient of the step.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>

#include "core/util/error.h"

namespace retort::distill {

struct NonFiniteLossPolicy {
  int64_t inject_nan_at_step = -1;  // train.inject_nan_at_step: the test hook that makes step N+1's loss...
  double injected_loss = std::numeric_limits<double>::quiet_NaN();  // ...this (train.inject_loss_value)

  // The loss value the run decides on at 0-based `step`: `value`, or the injected loss at the injected step.
  double observe(double value, int64_t step) const;

  // The error that stops the run at 0-based `step`, micro-batch `micro`.
  Error stop(double value, int64_t step, int64_t micro,
             const std::optional<std::filesystem::path>& last_checkpoint) const;
};

}  // namespace retort::distill
