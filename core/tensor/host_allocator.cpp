#include "core/tensor/host_allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/util/error.h"

namespace retort::host_allocator {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSmallestCached = size_t{1} << 20;
// Beyond this much idle memory, released blocks go back to the system: the cache serves a steady working set,
// it must not hold the peak of an earlier phase forever.
constexpr size_t kMaxCachedBytes = size_t{2} << 30;

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> blocks;  // rounded size -> idle block
  size_t bytes = 0;
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: tensors may be released during static destruction
  return *instance;
}

size_t rounded(size_t nbytes) {
  return (nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment);
}

}  // namespace

void* allocate(size_t nbytes) {
  const size_t size = rounded(nbytes);
  if (size >= kSmallestCached) {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    const auto it = c.blocks.find(size);
    if (it != c.blocks.end()) {
      void* ptr = it->second;
      c.blocks.erase(it);
      c.bytes -= size;
      return ptr;
    }
  }
  void* ptr = std::aligned_alloc(kAlignment, size);
  RETORT_CHECK(ptr != nullptr, "out of host memory allocating {} bytes", nbytes);
  return ptr;
}

void release(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  const size_t size = rounded(nbytes);
  if (size >= kSmallestCached) {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    if (c.bytes + size <= kMaxCachedBytes) {
      c.blocks.emplace(size, ptr);
      c.bytes += size;
      return;
    }
  }
  std::free(ptr);
}

void release_cached() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (auto& [size, ptr] : c.blocks) std::free(ptr);
  c.blocks.clear();
  c.bytes = 0;
}

}  // namespace retort::host_allocator
