#pragma once
// Times one call as the device sees it. On a GPU the call is bracketed by CUDA events on the device's compute
// stream: every retort kernel is ordered on that stream (and every NCCL collective too, through the
// communicator's event waits), so the time runs from the first queued work to the last, host-side launch gaps
// included, with no synchronisation inside the step to distort it. On the CPU the host clock does, since CPU
// work is done when the call returns.
#include <functional>

#include "core/tensor/device.h"

struct CUevent_st;  // CUDA's event (cudaEvent_t is a pointer to it): this header needs no CUDA include

namespace retort::bench {

class StepTimer {
 public:
  explicit StepTimer(Device device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // Milliseconds from the start of `step` to the end of the device work it queued.
  double ms(const std::function<void()>& step);

 private:
  Device device_;
  CUevent_st* start_ = nullptr;  // created once: an event per step would time its own creation
  CUevent_st* stop_ = nullptr;
};

}  // namespace retort::bench
