#include "parallel/generate/kv_cache.h"

#include <algorithm>

#include "core/util/error.h"
#include "parallel/models/gpt_model.h"
#include "parallel/tp/layers.h"

namespace retort::generate {

KvCache::KvCache(const GptModel& model, int64_t batch, int64_t capacity, DType dtype, Device device)
    : batch_(batch), capacity_(capacity), lengths_(static_cast<size_t>(batch), 0), device_(device) {
  const GptConfig& config = model.config();
  RETORT_INPUT_CHECK(batch > 0, "a KV cache needs at least one sequence, got a batch of {}", batch);
  RETORT_INPUT_CHECK(capacity > 0 && capacity <= config.block_size,
                     "a KV cache of {} positions does not fit the model's context (model.block_size = {}): ask for "
                     "at most {}",
                     capacity, config.block_size, config.block_size);
  // The key/value heads of this rank (grouped-query attention caches n_kv_head of them, not n_head).
  const int64_t local_heads = model.local_kv_heads();
  const int64_t head_dim = model.head_dim();
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    // Zeroed once: every slot a query reads has been written first, but no slot ever holds stray bit patterns.
    keys_.push_back(Tensor::zeros({batch, local_heads, capacity, head_dim}, dtype, device));
    values_.push_back(Tensor::zeros({batch, local_heads, capacity, head_dim}, dtype, device));
  }
}

void KvCache::advance(const std::vector<int64_t>& valid) {
  RETORT_CHECK(static_cast<int64_t>(valid.size()) == batch_, "KvCache::advance: {} counts for a batch of {}",
               valid.size(), batch_);
  for (int64_t row = 0; row < batch_; ++row) {
    RETORT_INPUT_CHECK(valid[static_cast<size_t>(row)] >= 0, "KvCache::advance: sequence {} cannot advance by {}", row,
                       valid[static_cast<size_t>(row)]);
    const int64_t next = lengths_[static_cast<size_t>(row)] + valid[static_cast<size_t>(row)];
    RETORT_INPUT_CHECK(next <= capacity_,
                       "sequence {} would hold {} positions in a KV cache of {}: the context is full", row, next,
                       capacity_);
  }
  // Checked whole before any row moves: a refused step leaves every length as it was.
  for (int64_t row = 0; row < batch_; ++row) lengths_[static_cast<size_t>(row)] += valid[static_cast<size_t>(row)];
  device_lengths_stale_ = true;
}

const Tensor& KvCache::lengths_on_device() {
  if (device_lengths_stale_) {
    device_lengths_ = Tensor::from_ints(std::vector<int32_t>(lengths_.begin(), lengths_.end()), {batch_}, device_);
    device_lengths_stale_ = false;
  }
  return device_lengths_;
}

void KvCache::reset() {
  std::fill(lengths_.begin(), lengths_.end(), 0);
  device_lengths_stale_ = true;
}

}  // namespace retort::generate
