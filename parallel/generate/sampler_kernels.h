#pragma once
// The two passes of the vocab-parallel sampler that read a whole vocabulary shard, each with a CPU implementation
// (sampler_kernels_cpu.cpp) and a CUDA one (sampler_kernels.cu) computing the same integers bit for bit
// (sampling_math.h). The results are small (per row) and come back to the host, where vocab_sampler.cpp reduces
// them over the tp group and takes the per-row decisions.
#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::generate::kernels {

// logits: [rows, V_local], f32 or bf16, on the CPU or a GPU; column j is the global token index_base + j.
//
// best_gumbel_candidates: per row, the packed (score key, global id) (sampling::pack_candidate) of the best
// Gumbel-max score x / T + g(seed, row_keys[r], id) among the tokens whose order key is at least min_keys[r];
// 0 when no token of this shard qualifies.
#define RETORT_SAMPLER_KERNELS                                                                                         \
  std::vector<uint64_t> best_gumbel_candidates(const Tensor& logits, int64_t index_base, double temperature,           \
                                               uint64_t seed, const std::vector<uint64_t>& row_keys,                   \
                                               const std::vector<uint32_t>& min_keys);                                 \
  /* nucleus_histogram: per row, sampling::kBins sums of the quantized masses of the tokens whose order key k */       \
  /* has (k & mask) == prefixes[r], binned by the digit (k >> shift) % kBins; row-major [rows, kBins]. */              \
  std::vector<uint64_t> nucleus_histogram(const Tensor& logits, double temperature, const std::vector<float>& row_max, \
                                          const std::vector<uint32_t>& prefixes, uint32_t mask, int shift);

namespace cpu {
RETORT_SAMPLER_KERNELS
}  // namespace cpu

// The Gumbel pass's per-row inputs as the device reads them.
struct SamplerRowParams {
  uint64_t row_key;
  uint32_t key_floor;  // min key (Gumbel pass) or prefix (histogram pass)
  float row_max;
};

#ifdef RETORT_WITH_CUDA
namespace cuda {
RETORT_SAMPLER_KERNELS

// The Gumbel pass of best_gumbel_candidates with its per-row parameters already on the device (params [rows]) and
// its result left there (best: rows 64-bit words, zeroed here first unless best_zeroed says the caller did: a
// graphed decode step's first kernel does, decode_step_io.h): it only enqueues work on the compute stream, no host
// copy and no wait, so a CUDA graph can capture it and each replay reads the row keys written before it.
void enqueue_best_gumbel(const Tensor& logits, int64_t index_base, double temperature, uint64_t seed,
                         const SamplerRowParams* params, uint64_t* best, bool best_zeroed = false);
// Greedy decoding's pass, enqueued the same way: best[r] = the max over the row's columns j of
// sampling::pack_candidate(order_key(logits[r, j]), index_base + j), i.e. the row's largest logit (NaN above
// everything, -0 = +0) and the smallest id holding it, packed: what kernels::topk with k = 1 finds, spread over
// many blocks per row instead of one.
void enqueue_argmax(const Tensor& logits, int64_t index_base, uint64_t* best, bool best_zeroed = false);
// dst[i] = src[i] for `words` 4-byte words (src null: zeros), by a kernel on the compute stream. Either side may be
// pinned host memory mapped into the device's address space: a decode step's graph then moves its inputs and
// results without copy or memset nodes, and the host's launch call of that graph of kernels only takes half as long
// (GraphedDecodeStep, docs/benchmarks.md).
void enqueue_word_copy(const uint32_t* src, uint32_t* dst, int64_t words);
// Whether the passes above zero their results and GraphedDecodeStep moves its inputs and results by kernels (the
// default) or by memset and copy nodes (RETORT_DECODE_GRAPH_COPIES=nodes, for measurements; read once).
bool copies_as_kernels();
}  // namespace cuda
#endif

#undef RETORT_SAMPLER_KERNELS

}  // namespace retort::generate::kernels
