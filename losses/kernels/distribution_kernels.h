#pragma once
// The raw passes of the vocab-parallel distribution losses (distribution_loss.h holds the op and the math).
// Each has a CPU implementation (kernels/cpu) and a CUDA one (kernels/cuda) with the same signature; the op
// runs them around two collectives:
//   local_stats  one read of student and teacher: per row the shard maxima of x' = x / T and t' = t / T and,
//                relative to them, S_r, Z_r and the divergence's partial (A_r, D_r or B_r)
//   MAX all-reduce of the packed maxima, then rescale (partials relative to the global maxima), then ONE SUM
//   all-reduce of the packed partials
//   finish       per row the global statistics and the divergence, their reduction to the scalar loss, and the
//                denominator
//   backward     one more read of student and teacher: the gradient from the saved statistics, no collective
// A partial that is +inf (mass on a token the other side rules out) stays +inf through every rescale; a shard
// whose maximum is -inf has partials 0. Statistics are f32, or f64 for f64 student logits (CPU only), so the
// CPU path can be checked against float64 references to 1e-12.
#include "core/tensor/tensor.h"
#include "losses/kernels/cross_entropy_kernels.h"  // kernels::Reduction

namespace retort::losses::kernels::distribution {

enum class Kind : int { ForwardKL = 0, ReverseKL = 1, SoftCrossEntropy = 2 };

// Doubles so the f64 CPU path loses nothing; the CUDA kernels round them to float once.
struct DistributionParams {
  Kind divergence = Kind::ForwardKL;
  double inv_temperature = 1.0;  // 1 / T
  double loss_scale = 1.0;       // T^2 or 1: multiplies every row's divergence
  int ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double normalizer = 1.0;  // Reduction::Normalizer: the loss is the sum divided by this
};

// Columns of the packed maxima [N, 2] (local, then global) and of the packed partials [N, 3].
inline constexpr int kStudentMax = 0, kTeacherMax = 1;
inline constexpr int kStudentSum = 0, kTeacherSum = 1, kCross = 2;
inline constexpr int kMaxColumns = 2, kPartialColumns = 3;
// Columns of the saved row statistics [N, 5]: global m_x' and log S, m_t' and log Z, and for the reverse KL the
// centre E_q[x' - t'] = B / S of its gradient (0 otherwise). Masked rows hold whatever their logits give.
inline constexpr int kRowStudentMax = 0, kRowStudentLogSum = 1, kRowTeacherMax = 2, kRowTeacherLogSum = 3,
                     kRowCentre = 4;
inline constexpr int kRowColumns = 5;

// labels: i32 [N] on the student's device, or an undefined tensor (every row counts).
#define RETORT_KD_KERNELS                                                                                           \
  /* student, teacher [N, Vl] -> local_max [N, kMaxColumns], partials [N, kPartialColumns] */                       \
  void local_stats(const Tensor& student, const Tensor& teacher, const DistributionParams& p, Tensor& local_max,    \
                   Tensor& partials);                                                                               \
  /* partials relative to local_max -> relative to global_max (in place) */                                         \
  void rescale(const Tensor& local_max, const Tensor& global_max, const DistributionParams& p, Tensor& partials);   \
  /* -> row_stats [N, kRowColumns], loss [] and denominator [] (what the summed loss was divided by) */             \
  void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const DistributionParams& p,  \
              Tensor& row_stats, Tensor& loss, Tensor& denominator);                                                \
  /* dstudent (= or += with accumulate) grad_output / denominator * dloss/dstudent; both scalars on the device */   \
  void backward(const Tensor& student, const Tensor& teacher, const Tensor& labels, const Tensor& row_stats,        \
                const Tensor& grad_output, const Tensor& denominator, const DistributionParams& p, bool accumulate, \
                Tensor& dstudent);

namespace cpu {
RETORT_KD_KERNELS
}  // namespace cpu

#ifdef RETORT_WITH_CUDA
namespace cuda {
RETORT_KD_KERNELS
}  // namespace cuda
#endif

#undef RETORT_KD_KERNELS

}  // namespace retort::losses::kernels::distribution
