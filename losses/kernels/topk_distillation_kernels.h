#pragma once
// The raw passes of the vocab-parallel top-k distillation losses (topk_distillation.h holds the op and the math;
// topk_distillation_row_math.h the per-row formulas both backends share). Each pass has a CPU implementation
// (kernels/cpu) and a CUDA one (kernels/cuda) with the same signature; the op runs them around two collectives:
//   local_stats  per row: the teacher's statistics over its index set S (every rank, from the k cached values),
//                the S members this rank owns (gathered), and one read of the shard for the rest bucket (the
//                columns NOT in S) and, when the hard-label CE needs its own temperature-1 statistics, the raw sum
//   MAX all-reduce of the packed maxima [N, kMaxColumns], then rescale (partials relative to the global maxima),
//   then ONE SUM all-reduce of the packed partials [N, kPartialColumns]
//   finish       per row the global statistics, the loss, its reduction, and the denominator
//   backward     one more read of the shard: the gradient from the saved statistics, no collective
// Statistics are f32, or f64 for f64 student logits (CPU only), so the CPU path can be checked against float64
// references to 1e-12. A partial that is +inf (teacher mass on a student -inf, or student mass on a teacher
// -inf) stays +inf through every rescale; a side whose maximum is -inf has partials 0.
#include "core/tensor/tensor.h"
#include "losses/kernels/cross_entropy_kernels.h"  // kernels::Reduction

namespace retort::losses::kernels::topk {

// ForwardKLSampled: the targets are weights a_j >= 0 of a sampled estimate of the teacher (log a_j in the
// log-prob slots), no rest bucket: the loss is sum_S a_j log(a_j / q_j), its gradient (sum_S a) q_j - a_j.
enum class Kind : int { ForwardKLRenormalized = 0, ForwardKLRest = 1, ReverseKL = 2, Mixed = 3, ForwardKLSampled = 4 };

// Doubles so the f64 CPU path loses nothing; the CUDA kernels round them to float once.
struct TopkParams {
  Kind kind = Kind::ForwardKLRest;
  double forward_weight = 0.5;   // Mixed: weight of the forward KL (1 - this on the reverse KL)
  double inv_temperature = 1.0;  // student z = x / T
  double teacher_scale = 1.0;    // cached log-probs are multiplied by this (1 / T or 1) before use
  double loss_scale = 1.0;       // T^2 or 1: multiplies the divergence
  double kd_ratio = 1.0;         // kd_ratio * loss_scale * KD + (1 - kd_ratio) * CE
  bool ce_separate = false;      // the CE needs its own statistics of the raw logits (T != 1 and kd_ratio < 1)
  bool scan_columns = true;      // false: only S is read (renormalized KL without the CE)
  int ignore_index = -100;
  int64_t vocab_start = 0;  // first global id of this rank's shard
  Reduction reduction = Reduction::Mean;
  double normalizer = 1.0;  // Reduction::Normalizer: the loss is the sum divided by this
};

// constexpr, so the CUDA kernels may call them too (--expt-relaxed-constexpr).
constexpr bool uses_ce(const TopkParams& p) {
  return p.kd_ratio != 1.0;
}
constexpr bool uses_kd(const TopkParams& p) {
  return p.kd_ratio != 0.0;
}

// Columns of the packed maxima [N, 3] (local, then global): of z over this shard's members of S, over its
// columns not in S, and of the raw logits x (only with ce_separate; -inf otherwise).
inline constexpr int kTopMax = 0, kRestMax = 1, kRawMax = 2;
inline constexpr int kMaxColumns = 3;
// Columns of the packed partials [N, 7], each relative to its own maximum above:
//   kTopSum        sum_{S} e^{z_j - m_S}
//   kRestSum       sum_{not S} e^{z_j - m_rest}               (a masked reduction: no cancellation)
//   kTopWeight     sum_{S} w_j, the teacher weights owned here (p_j; p^_j for the renormalized KL)
//   kForwardCross  sum_{S} w_j (log w_j - (z_j - m_S))         (+inf: w_j > 0 on a student -inf)
//   kReverseCross  sum_{S} e^{z_j - m_S} ((z_j - m_S) - l_j)   (+inf: student mass on a teacher -inf)
//   kRawSum        sum_{all} e^{x_j - m_raw}                   (ce_separate only)
//   kLabelLogit    x_y, on the rank that owns the label y (0 elsewhere; the SUM moves it to every rank)
inline constexpr int kTopSum = 0, kRestSum = 1, kTopWeight = 2, kForwardCross = 3, kReverseCross = 4, kRawSum = 5,
                     kLabelLogit = 6;
inline constexpr int kPartialColumns = 7;
// Columns of the saved row statistics [N, 11]. local_stats writes the teacher's two (the same on every rank);
// finish writes the others. Masked rows hold whatever their inputs give.
inline constexpr int kRowMax = 0,         // m = max_V z
    kRowLogSum = 1,                       // log sum_V e^{z - m}         (lse = m + this)
    kRowTopMax = 2, kRowTopLogSum = 3,    // m_S and log sum_S e^{z - m_S}
    kRowRestMax = 4, kRowRestLogSum = 5,  // m_rest and log sum_{not S} e^{z - m_rest}
    kRowTeacherLogMass = 6,               // logsumexp_S(teacher_scale * l), unclamped
    kRowTeacherLogRest = 7,               // log p_rest (the rest-bucket kinds; -inf for the sampled kind)
    kRowReverse = 8,                      // the row's reverse KL (the centre of its gradient)
    kRowRawMax = 9, kRowRawLogSum = 10;   // of the raw logits, for the CE
inline constexpr int kRowColumns = 11;

// Inputs: student [N, Vl] (this rank's columns), indices i32 [N, k] of GLOBAL ids, logprobs [N, k] (f32 or bf16;
// f64 on the CPU), labels i32 [N] or undefined, mask i32 [N] (0: the row does not count) or undefined.
#define RETORT_TOPK_KERNELS                                                                                        \
  /* -> local_max [N, kMaxColumns], partials [N, kPartialColumns], row_stats' teacher columns */                   \
  void local_stats(const Tensor& student, const Tensor& indices, const Tensor& logprobs, const Tensor& labels,     \
                   const TopkParams& p, Tensor& local_max, Tensor& partials, Tensor& row_stats);                   \
  /* partials relative to local_max -> relative to global_max (in place) */                                        \
  void rescale(const Tensor& local_max, const Tensor& global_max, Tensor& partials);                               \
  /* -> row_stats' other columns, loss [] and denominator [] (what the summed loss was divided by) */              \
  void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const Tensor& mask,          \
              const TopkParams& p, Tensor& row_stats, Tensor& loss, Tensor& denominator);                          \
  /* dstudent (= or += with accumulate) grad_output / denominator * dloss/dstudent; both scalars on the device */  \
  void backward(const Tensor& student, const Tensor& indices, const Tensor& logprobs, const Tensor& labels,        \
                const Tensor& mask, const Tensor& row_stats, const Tensor& grad_output, const Tensor& denominator, \
                const TopkParams& p, bool accumulate, Tensor& dstudent);

namespace cpu {
RETORT_TOPK_KERNELS
}  // namespace cpu

#ifdef RETORT_WITH_CUDA
namespace cuda {
RETORT_TOPK_KERNELS
// The largest k the CUDA kernels take (the row's indices sit in shared memory).
inline constexpr int64_t kMaxTopK = 2048;
}  // namespace cuda
#endif

#undef RETORT_TOPK_KERNELS

}  // namespace retort::losses::kernels::topk
