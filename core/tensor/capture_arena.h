#pragma once
// A block of device memory that stands in for the allocator while a CUDA graph is captured. The tensors made during
// the capture are carved from it in order and their frees are skipped, so the graph records no memory nodes (a
// stream-ordered allocation inside a capture becomes an allocation node and a free node, each costing a replay
// about as much as a small kernel: half of a GPT-2 decode step's nodes) and the addresses stay valid for every
// replay for as long as the arena lives. Size it from an eager run of the same work (AllocationTally).
#include <cstddef>

#include "core/tensor/device.h"

namespace retort {

class CaptureArena {
 public:
  CaptureArena(Device device, size_t bytes);
  ~CaptureArena();  // gives the block back: destroy the graphs that use it first
  CaptureArena(const CaptureArena&) = delete;
  CaptureArena& operator=(const CaptureArena&) = delete;

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }

  // While a Scope lives, this thread's allocations on the arena's device come from the arena.
  class Scope {
   public:
    explicit Scope(CaptureArena& arena);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CaptureArena* previous_;
  };

  // device_runtime's hooks: a carved block, or nullptr when no arena is open on this thread for `device` (a full
  // arena throws, naming its size); and whether `ptr` lies in a live arena (its free is then skipped).
  static void* carve_if_open(size_t nbytes, Device device);
  static bool owns(const void* ptr);

 private:
  void* carve(size_t nbytes);

  Device device_;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

// Counts the bytes this thread allocates on devices while it lives (nested tallies each count).
class AllocationTally {
 public:
  AllocationTally();
  ~AllocationTally();
  AllocationTally(const AllocationTally&) = delete;
  AllocationTally& operator=(const AllocationTally&) = delete;
  size_t bytes() const { return bytes_; }
  static void add(size_t nbytes);  // device_runtime's hook

 private:
  AllocationTally* previous_;
  size_t bytes_ = 0;
};

}  // namespace retort
