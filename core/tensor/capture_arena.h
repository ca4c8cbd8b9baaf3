#pragma once
// A block of device memory that stands in for the allocator while a CUDA graph is captured. The tensors made during
// the capture are carved from it in order and their frees are skipped, so the graph records no memory nodes (a
// stream-ordered allocation inside a capture becomes an allocation node and a free node, each costing a replay
// about as much as a small kernel: half of a GPT-2 decode step's nodes) and the addresses stay valid for every
// replay for as long as the arena lives. Size it from an eager run of the same work (AllocationTally).
//
// With Reuse::kAfterFree a freed block is handed out again to a later allocation of the same capture, as the
// stream-ordered pool would: safe because a capture on one stream records a chain, every node after the ones before
// it, and the replays of one graph follow each other on that stream. A training step's activations then take about
// their eager peak (AllocationTally::peak_bytes) instead of the sum of everything the step allocates.
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/tensor/arena_offsets.h"
#include "core/tensor/device.h"

namespace retort {

class CaptureArena {
 public:
  enum class Reuse { kNever, kAfterFree };
  CaptureArena(Device device, size_t bytes, Reuse reuse = Reuse::kNever);
  ~CaptureArena();  // gives the block back: destroy the graphs that use it first
  CaptureArena(const CaptureArena&) = delete;
  CaptureArena& operator=(const CaptureArena&) = delete;

  size_t used() const;  // the furthest any block has reached
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
  // arena throws, naming its size); whether `ptr` lies in a live arena; and the free of `nbytes` at `ptr`, true
  // when an arena took it (skipped, or kept for reuse) and the allocator must not.
  static void* carve_if_open(size_t nbytes, Device device);
  static bool owns(const void* ptr);
  static bool release_if_owned(void* ptr, size_t nbytes);

 private:
  void* carve(size_t nbytes);
  void give_back(void* ptr, size_t nbytes);

  Device device_;
  Reuse reuse_;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
  std::unique_ptr<std::mutex> offsets_mutex_;  // frees may come from any thread
  std::unique_ptr<ArenaOffsets> offsets_;      // Reuse::kAfterFree only
};

// Counts the bytes this thread allocates on devices while it lives (nested tallies each count): all of them
// (bytes(), what an arena that never reuses must hold) and the most live at once of those it saw allocated
// (peak_bytes(), what an arena that reuses freed blocks needs, before fragmentation).
class AllocationTally {
 public:
  AllocationTally();
  ~AllocationTally();
  AllocationTally(const AllocationTally&) = delete;
  AllocationTally& operator=(const AllocationTally&) = delete;
  size_t bytes() const { return bytes_; }
  size_t peak_bytes() const { return peak_; }
  static void add(const void* ptr, size_t nbytes);  // device_runtime's hooks
  static void remove(const void* ptr);

 private:
  AllocationTally* previous_;
  size_t bytes_ = 0, live_ = 0, peak_ = 0;
  std::unordered_map<const void*, size_t> blocks_;  // the live blocks this tally saw allocated
};

}  // namespace retort
