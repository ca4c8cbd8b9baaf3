#pragma once
// The raw passes of the vocab-parallel cross-entropy (cross_entropy.h holds the op and the math). Each has a
// CPU implementation (kernels/cpu) and a CUDA one (kernels/cuda) with the same signature; the op runs them
// around two collectives:
//   local_stats  one read of the logits: per row the shard's max m_r and, relative to it, S_r = sum exp(x - m_r),
//                the target logit if this shard owns it, and sum (x - m_r) (label smoothing's mean log q)
//   MAX all-reduce of m_r, then rescale (partials relative to the global max), then ONE SUM all-reduce
//   finish       per row lse and loss, their reduction to the scalar loss, and the denominator
//   backward     one more read of the logits: the gradient from lse, no collective
#include "core/tensor/tensor.h"

namespace retort::losses::kernels {

enum class Reduction : int { Mean = 0, Sum = 1, Normalizer = 2 };

// Everything the per-row math needs; smoothing is the effective s of losses.md for either convention.
struct CrossEntropyParams {
  int ignore_index = -100;
  int64_t vocab_start = 0;  // first global id of this shard
  int64_t vocab_total = 0;  // the global vocabulary V
  float smoothing = 0.f;    // target (1 - s) on the label plus s / V everywhere
  float z_loss = 0.f;
  Reduction reduction = Reduction::Mean;
  float normalizer = 1.f;  // Reduction::Normalizer: the loss is the sum divided by this
};

inline constexpr int kPartials = 3;  // S, target logit, sum of shifted logits

#define RETORT_CE_KERNELS                                                                                           \
  /* logits [N, Vl] (f32, bf16; f64 on CPU), targets i32 [N] -> local_max f32 [N], partials f32 [N, 3] */           \
  void local_stats(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,     \
                   Tensor& partials);                                                                               \
  /* partials relative to local_max -> relative to global_max (in place); vocab_local = Vl */                       \
  void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials);           \
  /* -> lse f32 [N], loss f32 [] and denominator f32 [] (what the summed loss was divided by) */                    \
  void finish(const Tensor& global_max, const Tensor& partials, const Tensor& targets, const CrossEntropyParams& p, \
              Tensor& lse, Tensor& loss, Tensor& denominator);                                                      \
  /* dlogits (= or += with accumulate) grad_output / denominator * dloss/dlogits; both scalars on the device */     \
  void backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_output,          \
                const Tensor& denominator, const CrossEntropyParams& p, bool accumulate, Tensor& dlogits);

namespace cpu {
RETORT_CE_KERNELS
}  // namespace cpu

#ifdef RETORT_WITH_CUDA
namespace cuda {
RETORT_CE_KERNELS
}  // namespace cuda
#endif

#undef RETORT_CE_KERNELS

}  // namespace retort::losses::kernels
