#pragma once
// The raw passes of the vocab-parallel cross-entropy (cross_entropy.h holds the op and the math). Each has a
// CPU implementation (kernels/cpu) and a CUDA one (kernels/cuda) with the same signature; the op runs them
// around two collectives:
//   local_stats  one read of the logits: per row the shard's max m_r and, relative to it, S_r = sum exp(x - m_r),
//                the target logit if this shard owns it, and sum (x - m_r) (label smoothing's mean log q)
//   MAX all-reduce of m_r, then rescale (partials relative to the global max), then ONE SUM all-reduce
//   finish       per row lse and loss, their reduction to the scalar loss, and the denominator
//   backward     one more read of the logits: the gradient from lse, no collective
// Target ids are validated by the op on the host, or recorded by the CUDA local_stats for targets that live on
// the GPU; a kernel only ever indexes the logits with an id its shard owns.
// Statistics (local_max, partials, lse, loss, denominator) are f32, or f64 for f64 logits (CPU only), so the
// CPU path can be checked against float64 references to 1e-12.
#include "core/tensor/tensor.h"

namespace retort::losses::kernels {

enum class Reduction : int { Mean = 0, Sum = 1, Normalizer = 2 };

// Everything the per-row math needs; smoothing is the effective s of losses.md for either convention. Doubles
// so the f64 CPU path loses nothing; the CUDA kernels round them to float once.
struct CrossEntropyParams {
  int ignore_index = -100;
  int64_t vocab_start = 0;  // first global id of this shard
  int64_t vocab_total = 0;  // the global vocabulary V
  double smoothing = 0.0;   // target (1 - s) on the label plus s / V everywhere
  double z_loss = 0.0;
  Reduction reduction = Reduction::Mean;
  double normalizer = 1.0;  // Reduction::Normalizer: the loss is the sum divided by this
};

// Columns of the packed partials. The shifted sum is only needed (and only reduced) with label smoothing.
inline constexpr int kSumExp = 0, kTargetLogit = 1, kShiftedSum = 2;
inline int partial_columns(const CrossEntropyParams& p) {
  return p.smoothing != 0.0 ? 3 : 2;
}

#define RETORT_CE_KERNELS                                                                                           \
  /* logits [N, Vl], targets i32 [N] -> local_max [N], partials [N, partial_columns(p)] */                          \
  void local_stats(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,     \
                   Tensor& partials);                                                                               \
  /* partials relative to local_max -> relative to global_max (in place); vocab_local = Vl */                       \
  void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials);           \
  /* -> lse [N], loss [] and denominator [] (what the summed loss was divided by) */                                \
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
// local_stats records a target outside [0, V) that is not ignore_index on the device instead of reading out
// of bounds; this waits for the stream and throws InputError naming it. The op calls it only for targets that
// live on the GPU (host targets are checked on the host, which needs no synchronisation).
void throw_if_bad_target(const CrossEntropyParams& p);
}  // namespace cuda
#endif

#undef RETORT_CE_KERNELS

}  // namespace retort::losses::kernels
