#pragma once
// Peak memory of one step on a GPU, from the stream-ordered pool every retort GPU tensor comes from: its
// high-water mark is reset before the step and read after it, minus what was in use at the start, so the
// step's own allocations (its outputs included) count and the inputs it was given do not. Not measured on the
// CPU, whose allocator keeps no such mark. Work replayed as CUDA graphs takes its memory from the graphs' own pool:
// its high-water mark counts on top of what the stream-ordered pool holds after the step (the persistent tensors),
// and the peak is the larger of that and the stream-ordered pool's own peak.
#include <cstdint>

#include "core/tensor/device.h"

namespace retort::bench {

class PoolMeter {
 public:
  explicit PoolMeter(Device device) : device_(device) {}
  bool available() const { return device_.is_cuda(); }

  // Waits for the device, then resets the high-water mark to what is in use now.
  void start();
  // Bytes above the level at start() at the peak since, or -1 when not measured.
  double extra();

 private:
  Device device_;
  uint64_t base_ = 0;
};

}  // namespace retort::bench
