#include "core/tensor/arena_offsets.h"

#include <algorithm>
#include <iterator>

#include "core/util/error.h"

namespace retort {

ArenaOffsets::ArenaOffsets(size_t capacity, size_t alignment) : capacity_(capacity), alignment_(alignment) {
  RETORT_CHECK(alignment_ > 0, "ArenaOffsets: the alignment must be positive");
}

size_t ArenaOffsets::rounded(size_t nbytes) const {
  return (std::max<size_t>(nbytes, 1) + alignment_ - 1) / alignment_ * alignment_;
}

std::optional<size_t> ArenaOffsets::take(size_t nbytes) {
  const size_t size = rounded(nbytes);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
  if (best != free_.end()) {
    const size_t offset = best->first, left = best->second - size;
    free_.erase(best);
    if (left > 0) free_.emplace(offset + size, left);
    in_use_ += size;
    return offset;
  }
  // A free block that ends at end_ grows into the untouched space instead of leaving a hole below it.
  size_t offset = end_;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == end_) offset = last->first;
  }
  if (offset + size > capacity_) return std::nullopt;
  if (offset != end_) free_.erase(offset);
  end_ = offset + size;
  in_use_ += size;
  return offset;
}

void ArenaOffsets::give_back(size_t offset, size_t nbytes) {
  size_t begin = offset, size = rounded(nbytes);
  RETORT_CHECK(begin + size <= end_, "ArenaOffsets: a block at {} of {} bytes was never taken (end {})", begin, size,
               end_);
  in_use_ -= size;
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && begin + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == begin) {
      begin = previous->first;
      size += previous->second;
      free_.erase(previous);
    }
  }
  free_.emplace(begin, size);
}

}  // namespace retort
