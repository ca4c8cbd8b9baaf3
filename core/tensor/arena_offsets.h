#pragma once
// Offsets in a fixed block handed out and taken back, as an allocator would, without touching memory: the bookkeeping
// of a CaptureArena that reuses freed blocks (capture_arena.h). Best fit among the free blocks (the smallest one that
// holds the request, lowest offset on ties), else the end of what has been used; a block given back merges with
// free neighbours. Sizes are rounded up to `alignment`.
#include <cstddef>
#include <map>
#include <optional>

namespace retort {

class ArenaOffsets {
 public:
  ArenaOffsets(size_t capacity, size_t alignment);

  // The offset of a block of `nbytes`, or nullopt when no free block and no room at the end holds it.
  std::optional<size_t> take(size_t nbytes);
  // Gives back the block taken at `offset` with `nbytes` (the size asked for).
  void give_back(size_t offset, size_t nbytes);

  size_t capacity() const { return capacity_; }
  size_t high_water() const { return end_; }  // the furthest any block has reached
  size_t in_use() const { return in_use_; }

 private:
  size_t rounded(size_t nbytes) const;

  size_t capacity_, alignment_;
  size_t end_ = 0;                 // everything at or past end_ has never been taken
  size_t in_use_ = 0;              // bytes in blocks taken and not given back
  std::map<size_t, size_t> free_;  // offset -> size of the free blocks below end_, never adjacent to each other
};

}  // namespace retort
