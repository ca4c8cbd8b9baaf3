#pragma once
// The keys and values of every attention layer of a GptModel for a batch of sequences being generated, so that
// each new token costs one position of compute instead of a whole forward over the prefix. Under tensor
// parallelism every rank caches only its own key/value heads (the projections are column-parallel), so the cache is
// 1/tp of the dense one; with grouped-query attention it holds n_kv_head heads, not n_head (one per rank when there
// are fewer kv heads than ranks).
//
// Sequences advance independently: each has its own length, its new tokens go to positions length, length+1, ...
// and attend keys [0, position]. A batch of prompts of different lengths is therefore right-padded, prefilled in
// one call with per-row valid counts, and decoded one token per row per step; a row's padding is written past its
// length and overwritten by its next real token, never read. Batched generation equals one-by-one generation.
#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {
class GptModel;
}

namespace retort::generate {

class KvCache {
 public:
  // Room for `capacity` positions (at most the model's block_size) of `batch` sequences, in `dtype` (the compute
  // dtype of the forward) on `device`, with the model's layer count and this rank's heads.
  KvCache(const GptModel& model, int64_t batch, int64_t capacity, DType dtype, Device device);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  int64_t length(int64_t row) const { return lengths_[static_cast<size_t>(row)]; }
  const std::vector<int64_t>& lengths() const { return lengths_; }

  // Per layer: keys and values [batch, local_kv_heads, capacity, head_dim] (GptModel::local_kv_heads, head_dim).
  Tensor& keys(int64_t layer) { return keys_[static_cast<size_t>(layer)]; }
  Tensor& values(int64_t layer) { return values_[static_cast<size_t>(layer)]; }

  // The lengths as an i32 [batch] tensor on the cache's device, the attention kernels' copy: refreshed from
  // lengths() on the first use after a change, so a step pays one host-to-device copy (which waits for the
  // device), not one per layer.
  const Tensor& lengths_on_device();

  // Called by the model after every layer has written `valid[row]` new positions of each row.
  void advance(const std::vector<int64_t>& valid);
  // Forgets every sequence (lengths back to 0); the memory is kept for the next batch.
  void reset();

 private:
  int64_t batch_ = 0, capacity_ = 0;
  std::vector<int64_t> lengths_;
  std::vector<Tensor> keys_, values_;
  Device device_;
  Tensor device_lengths_;
  bool device_lengths_stale_ = true;
};

}  // namespace retort::generate
