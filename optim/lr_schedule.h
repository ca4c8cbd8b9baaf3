#pragma once
// Learning-rate schedules as pure functions of the step (0-based), so a resumed run needs no state.
#include <string>

namespace retort::optim {

struct LrSchedule {
  std::string kind = "cosine";  // constant | cosine | linear (each after a linear warmup)
  double peak_lr = 3e-4;
  double min_lr = 3e-5;  // floor of the decay
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double at(int64_t step) const;
  void validate() const;
};

}  // namespace retort::optim
