#pragma once
// The layout of a multi-tensor launch (the AdamW update, the gradient norm): one block per fixed-size chunk of one
// tensor of a table held in the kernel's parameters, the table listing where each tensor's chunks start (a prefix
// sum); a block finds its tensor by binary search over those starts.
#include <cstdint>

namespace retort::optim {

// The index of the last tensor whose first chunk is at or before `chunk` (first_chunk ascending, count >= 1).
__device__ inline int tensor_of_chunk(const int64_t* first_chunk, int count, int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_chunk[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace retort::optim
