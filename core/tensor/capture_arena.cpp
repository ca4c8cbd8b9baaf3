#include "core/tensor/capture_arena.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort {
namespace {

thread_local CaptureArena* open_arena = nullptr;
thread_local AllocationTally* open_tally = nullptr;

// The live arenas' address ranges. Frees are frequent and arenas rare: the count keeps the common path lock-free.
std::atomic<int> live_arenas{0};
std::mutex ranges_mutex;
std::vector<std::pair<uintptr_t, uintptr_t>>& ranges() {
  static std::vector<std::pair<uintptr_t, uintptr_t>> r;
  return r;
}

// The alignment cudaMalloc gives, which vectorised kernels may rely on.
constexpr size_t kAlignment = 256;

}  // namespace

CaptureArena::CaptureArena(Device device, size_t bytes) : device_(device) {
  RETORT_CHECK(device.is_cuda(), "CaptureArena: a capture arena holds GPU memory, got {}", device.str());
  capacity_ = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  base_ = static_cast<char*>(device_runtime::allocate(capacity_, device));
  std::lock_guard lock(ranges_mutex);
  ranges().emplace_back(reinterpret_cast<uintptr_t>(base_), reinterpret_cast<uintptr_t>(base_) + capacity_);
  live_arenas.fetch_add(1, std::memory_order_release);
}

CaptureArena::~CaptureArena() {
  {
    std::lock_guard lock(ranges_mutex);
    auto& r = ranges();
    r.erase(std::remove(r.begin(), r.end(),
                        std::pair{reinterpret_cast<uintptr_t>(base_), reinterpret_cast<uintptr_t>(base_) + capacity_}),
            r.end());
    live_arenas.fetch_sub(1, std::memory_order_release);
  }
  device_runtime::release(base_, capacity_, device_);
}

void* CaptureArena::carve(size_t nbytes) {
  const size_t size = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  RETORT_CHECK(used_ + size <= capacity_,
               "CaptureArena: {} bytes requested with {} of {} in use: the captured work allocates more than the "
               "eager run it was sized from",
               nbytes, used_, capacity_);
  void* ptr = base_ + used_;
  used_ += size;
  return ptr;
}

CaptureArena::Scope::Scope(CaptureArena& arena) : previous_(open_arena) {
  open_arena = &arena;
}

CaptureArena::Scope::~Scope() {
  open_arena = previous_;
}

void* CaptureArena::carve_if_open(size_t nbytes, Device device) {
  if (open_arena == nullptr || open_arena->device_ != device) return nullptr;
  return open_arena->carve(nbytes);
}

bool CaptureArena::owns(const void* ptr) {
  if (live_arenas.load(std::memory_order_acquire) == 0) return false;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(ranges_mutex);
  for (const auto& [begin, end] : ranges())
    if (address >= begin && address < end) return true;
  return false;
}

AllocationTally::AllocationTally() : previous_(open_tally) {
  open_tally = this;
}

AllocationTally::~AllocationTally() {
  open_tally = previous_;
}

void AllocationTally::add(size_t nbytes) {
  // As an arena would carve it.
  const size_t size = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  for (AllocationTally* t = open_tally; t != nullptr; t = t->previous_) t->bytes_ += size;
}

}  // namespace retort
