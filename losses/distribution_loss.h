#pragma once
// Distribution losses between a student and a teacher over vocab-sharded logits (knowledge distillation with a
// temperature): forward KL(p || q), reverse KL(q || p) and the soft cross-entropy -sum p log q, where
// p = softmax(teacher / T) and q = softmax(student / T) over the GLOBAL vocabulary. The math and edge cases are
// in the reference losses.md ("Distribution losses"); in short, per row, with x' = x / T and t' = t / T:
//   one pass over the shard reads student and teacher once and keeps the shard maxima m_x,r and m_t,r and, relative
//   to them, S_r = sum e^{x' - m_x,r}, Z_r = sum e^{t' - m_t,r} and one more partial:
//     forward KL  A_r = sum e^{t' - m_t,r} (t' - x')        KL = A / Z - lse_t' + lse_x'
//     soft CE     D_r = sum e^{t' - m_t,r} (m_x,r - x')     CE = D / Z + log S      (= lse_x' - E_p[x'])
//     reverse KL  B_r = sum e^{x' - m_x,r} (x' - t')        KL = B / S - lse_x' + lse_t'
//   ONE MAX all-reduce of the packed maxima [rows, 2], each partial moved to the global maxima, ONE SUM all-reduce
//   of the packed partials [rows, 3]: O(tokens) bytes, never the vocabulary.
// The soft CE keeps D (every term >= 0) rather than A plus the teacher's entropy, so no two large numbers cancel
// when the logits are large.
// The loss is T^2 x the per-row divergence (scale_by_t_squared; Hinton et al. 2015), reduced over the valid rows.
// Gradients wrt the raw student logits, with no collective (the global row statistics are saved in forward):
//   forward KL, soft CE   T^2 / T (q_j - p_j)                 = T (q_j - p_j)
//   reverse KL            T^2 / T q_j (log q_j - log p_j - KL) = T q_j ((x'_j - t'_j) - E_q[x' - t'])
// (d/dx = (1/T) d/dx': one factor of T from the chain rule through x / T against the T^2 scaling), times the
// output gradient over the denominator; without the T^2 scaling the factor is 1 / T.
//
// -inf logits are impossible tokens. A term with p_j = 0 (teacher -inf) adds 0 to the forward KL and the soft CE,
// a term with q_j = 0 (student -inf) adds 0 to the reverse KL; a shard whose entries are all -inf adds nothing and
// never makes a NaN. Mass on a token the other side rules out makes the divergence +inf (forward KL and soft CE
// where the teacher has mass and the student is -inf: the gradient stays finite; reverse KL where the student
// has mass and the teacher is -inf: the gradient is then NaN, as in PyTorch). A valid row with no finite student
// or no finite teacher logit has no distribution and gives NaN; masked rows never produce one.
#include <memory>
#include <optional>

#include "losses/cross_entropy.h"
#include "parallel/comm/communicator.h"

namespace retort::losses {

enum class Divergence { ForwardKL, ReverseKL, SoftCrossEntropy };

struct DistributionLossOptions {
  Divergence divergence = Divergence::ForwardKL;
  double temperature = 1.0;  // both sides divided by T (> 0)
  // Loss x T^2 (KDLoss semantics: the size of the gradient does not depend on T).
  bool scale_by_t_squared = true;
  int ignore_index = -100;                // rows whose label is ignore_index are masked (when labels are given)
  Reduction reduction = Reduction::Mean;  // Mean: over the valid (not masked) rows of this call
  // When set, the loss is the sum divided by this (a global token count, for gradient accumulation and data
  // parallelism); it overrides `reduction`.
  std::optional<double> normalizer;
  // The tp group the vocabulary is split over; by default the one on student.sharding() (last dim).
  std::shared_ptr<Communicator> group;
};

// student [..., V_local] (f32 or bf16, CPU or CUDA; f64 on the CPU), teacher of the same shape on the same
// device (f32 or bf16; f64 on the CPU; a constant: it gets no gradient; on the CPU it is computed in the
// student's precision), labels i32 [...] (or the rows flattened) used only to mask rows equal to ignore_index,
// or an undefined Tensor (every row counts). Rank r of the group owns global columns [r V_local, (r + 1) V_local)
// of both. Without a group, or with a group of one rank, no collective runs. Returns a 0-dim f32 tensor (f64
// for f64 student logits), equal on every rank, recorded as one autograd node whose backward writes each
// rank's exact LOCAL gradient wrt the student logits, in their dtype, with no collective. The mean's row count
// stays on the device; an all-masked batch gives 0 and zero gradients.
Tensor distribution_loss(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                         const DistributionLossOptions& options = {});

// ---- the same loss without the tape, for a fused trainer that owns its gradient buffers ----------------------

// What the backward needs besides the student and teacher logits (all of it on the student's device, O(rows)).
struct DistributionLossSaved {
  Tensor labels;       // i32 [N] on the student's device, or undefined (no masking)
  Tensor row_stats;    // [N, 5]: global m_x', log S, m_t', log Z, E_q[x' - t'] (reverse KL) (f32; f64 for f64)
  Tensor denominator;  // []: the valid-row count (at least 1), 1, or the normalizer
  Divergence divergence = Divergence::ForwardKL;
  double temperature = 1.0;
  double loss_scale = 1.0;  // T^2 or 1
  int ignore_index = -100;
  int64_t vocab_valid = 0;  // the shard's real columns (fewer than its width when the shard is padded)
};

struct DistributionLossForward {
  Tensor loss;  // [] f32 (f64 for f64 student logits), not recorded on the tape
  DistributionLossSaved saved;
};

// The forward (both collectives included) of distribution_loss(), recording nothing.
DistributionLossForward distribution_loss_forward(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                                                  const DistributionLossOptions& options = {});

// grad_student (student's shape and device) = grad_output * dloss/dstudent, or += with accumulate; `teacher` is
// the one given to the forward. grad_student may be f32 or bf16 for f32 / bf16 student logits (an f32
// accumulator for bf16 logits is fine), f64 for f64 logits. grad_output: a one-element tensor, best on the
// student's device (then nothing waits for the host), or undefined for 1. Masked rows get 0 (are left alone
// when accumulating). No collective.
void distribution_loss_backward(const Tensor& student, const Tensor& teacher, const DistributionLossSaved& saved,
                                const Tensor& grad_output, Tensor& grad_student, bool accumulate = false);

// Loss and gradient in one call, the output gradient taken as 1: grad_student = (or += with accumulate)
// dloss/dstudent; grad_student may be the student tensor itself (in place). As cross_entropy_with_grad(): on one
// GPU (no tp group) of compute capability 9.0+ with rows that fit a cluster's shared memory (student plus teacher
// bytes up to 800 KiB a row) student and teacher are read ONCE; elsewhere forward then backward.
Tensor distribution_loss_with_grad(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                                   Tensor& grad_student, const DistributionLossOptions& options = {},
                                   bool accumulate = false);

}  // namespace retort::losses
