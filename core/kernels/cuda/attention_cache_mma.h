#pragma once
// The decode step's attention over a bf16 key/value cache on the tensor cores (attention_cache_mma.cu), for
// attention_cache.cu, which chooses between it and the CUDA-core decode kernel.
#include <cstdint>

#include "core/kernels/cuda/common.cuh"

namespace retort::kernels::cuda {

// Where the new queries, keys and values of a decode step are (row strides in elements) and the cache's shape.
struct CacheDecodeArgs {
  using bf16 = detail::bf16;
  const bf16* q;  // [B, Tn, H * D], rows q_stride apart
  int64_t q_stride;
  const bf16* k_new;  // [B, Tn, KV * D], rows kv_stride apart
  const bf16* v_new;
  int64_t kv_stride;
  const int32_t* starts;  // [B]: the first new position of each row
  bf16* k_cache;          // [B, KV, cap, D]
  bf16* v_cache;
  bf16* out;  // [B, Tn, H * D]
  int64_t B, Tn, H, KV, D, cap;
};

// Whether the tensor-core kernel takes this step: head size 64 or 128, at most 16 query rows per key/value head
// (query heads per key/value head times new positions), 16-byte aligned rows. `enough_blocks` is false when
// B * KV is below the GPU's multiprocessor count: one block per row and key/value head would leave most of the
// GPU idle, and the CUDA-core kernel, with a block per query, spreads wider.
bool cache_decode_mma_fits(const CacheDecodeArgs& a);
bool cache_decode_mma_enough_blocks(const CacheDecodeArgs& a);

// Appends the new keys and values to the cache and writes every new query's attention over its row's positions
// [0, start + t] (positions past the cache are dropped, and their queries see the whole cache).
void cache_decode_mma(const CacheDecodeArgs& a, bool dependent_launch);

}  // namespace retort::kernels::cuda
