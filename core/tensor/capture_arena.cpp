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

// The live arenas. Frees are frequent and arenas rare: the count keeps the common path lock-free.
std::atomic<int> live_arenas{0};
std::mutex ranges_mutex;
std::vector<CaptureArena*>& arenas() {
  static std::vector<CaptureArena*> r;
  return r;
}

// The alignment cudaMalloc gives, which vectorised kernels may rely on.
constexpr size_t kAlignment = 256;

}  // namespace

CaptureArena::CaptureArena(Device device, size_t bytes, Reuse reuse) : device_(device), reuse_(reuse) {
  RETORT_CHECK(device.is_cuda(), "CaptureArena: a capture arena holds GPU memory, got {}", device.str());
  capacity_ = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  base_ = static_cast<char*>(device_runtime::allocate(capacity_, device));
  if (reuse_ == Reuse::kAfterFree) {
    offsets_mutex_ = std::make_unique<std::mutex>();
    offsets_ = std::make_unique<ArenaOffsets>(capacity_, kAlignment);
  }
  std::lock_guard lock(ranges_mutex);
  arenas().push_back(this);
  live_arenas.fetch_add(1, std::memory_order_release);
}

CaptureArena::~CaptureArena() {
  {
    std::lock_guard lock(ranges_mutex);
    auto& r = arenas();
    r.erase(std::remove(r.begin(), r.end(), this), r.end());
    live_arenas.fetch_sub(1, std::memory_order_release);
  }
  device_runtime::release(base_, capacity_, device_);
}

size_t CaptureArena::used() const {
  if (!offsets_) return used_;
  std::lock_guard lock(*offsets_mutex_);
  return offsets_->high_water();
}

void* CaptureArena::carve(size_t nbytes) {
  if (offsets_) {
    std::lock_guard lock(*offsets_mutex_);
    const std::optional<size_t> offset = offsets_->take(nbytes);
    RETORT_CHECK(offset.has_value(),
                 "CaptureArena: {} bytes requested with {} of {} in use: the captured work allocates more than the "
                 "eager run it was sized from",
                 nbytes, offsets_->in_use(), capacity_);
    return base_ + *offset;
  }
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
  for (const CaptureArena* arena : arenas()) {
    const auto begin = reinterpret_cast<uintptr_t>(arena->base_);
    if (address >= begin && address < begin + arena->capacity_) return true;
  }
  return false;
}

bool CaptureArena::release_if_owned(void* ptr, size_t nbytes) {
  if (live_arenas.load(std::memory_order_acquire) == 0) return false;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(ranges_mutex);
  for (CaptureArena* arena : arenas()) {
    const auto begin = reinterpret_cast<uintptr_t>(arena->base_);
    if (address < begin || address >= begin + arena->capacity_) continue;
    if (arena->offsets_) arena->give_back(ptr, nbytes);
    return true;
  }
  return false;
}

void CaptureArena::give_back(void* ptr, size_t nbytes) {
  std::lock_guard lock(*offsets_mutex_);
  offsets_->give_back(static_cast<size_t>(static_cast<char*>(ptr) - base_), nbytes);
}

AllocationTally::AllocationTally() : previous_(open_tally) {
  open_tally = this;
}

AllocationTally::~AllocationTally() {
  open_tally = previous_;
}

void AllocationTally::add(const void* ptr, size_t nbytes) {
  // As an arena would carve it.
  const size_t size = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  for (AllocationTally* t = open_tally; t != nullptr; t = t->previous_) {
    t->bytes_ += size;
    t->blocks_[ptr] = size;
    t->live_ += size;
    t->peak_ = std::max(t->peak_, t->live_);
  }
}

void AllocationTally::remove(const void* ptr) {
  for (AllocationTally* t = open_tally; t != nullptr; t = t->previous_) {
    const auto it = t->blocks_.find(ptr);
    if (it == t->blocks_.end()) continue;  // allocated before this tally began
    t->live_ -= it->second;
    t->blocks_.erase(it);
  }
}

}  // namespace retort
