#pragma once
// Distillation losses from a teacher's cached top-k log-probabilities over vocab-sharded student logits (the
// reference distillation.md, "Student losses over the teacher's index set S"). Per token the cache holds S, the
// k GLOBAL vocabulary ids the teacher ranked highest, and l_j = log p_j for j in S, normalised over the FULL
// vocabulary (so the teacher's tail mass p_rest = 1 - sum_S p_j is known; -inf entries are allowed). The student
// distribution is q = softmax(z) over the full vocabulary, z = x / T.
//
// Divergences (TopkDivergence):
//   ForwardKLRest (the default): the (k+1)-category forward KL, S plus one "rest" bucket holding the tail:
//       L = sum_S p_j log(p_j / q_j) + p_rest log(p_rest / q_rest),   q_rest = sum_{j not in S} q_j
//     exact and never negative. log p_rest = log1mexp(logsumexp_S l) with the logsumexp clamped to <= -1e-7 (a
//     cache that holds all the mass keeps a rest bucket of ~1e-7); log q_rest = lse_{V \ S}(z) - lse_V(z), from
//     a MASKED reduction over the columns not in S (never 1 - sum_S q_j, which cancels when the student puts
//     almost all its mass on S); in the loss it is clamped to >= -100 so a student without any tail (k = V, or
//     a tail of -inf) gets a finite value.
//     dL/dz_j = W q_j - p_j on S, W q_j - p_rest q_j / q_rest off S, W = sum_S p_j + p_rest (1 when the cache's
//     mass and the clamped rest add up; kept so the gradient is the exact derivative of the reported loss).
//   ReverseKL: the reverse KL over the same k+1 categories, sum_c q_c log(q_c / p_c);
//     dL/dz_j = q_j (l_c(j) - L) with l_c = log(q_c / p_c) of j's category (j itself on S, the rest bucket off S).
//   Mixed: forward_weight * ForwardKLRest + (1 - forward_weight) * ReverseKL (default weight 0.5).
//   ForwardKLRenormalized (NeMo RL's default): p^ = softmax over S of the teacher's log-probs, q^ = softmax over
//     S of z; sum_S p^_j log(p^_j / q^_j); dL/dz_j = q^_j - p^_j on S, 0 elsewhere. The tail is ignored.
//   ForwardKLSampled: sampled-logit KD (Anshumann et al., ACL 2025, "Sparse Logit Sampling"). The cache holds,
//     per token, ids drawn from a proposal r (the teacher at a proposal temperature, r_j ~ p_j^(1/t)), and the
//     targets are the weights of the importance-sampling estimate of the teacher: in the log-prob slots,
//     log a_j with a_j = (c_j / K) (p_j / r_j), c_j the draws of id j out of K (-inf for a slot no draw hit). Then
//     E[a_j] = p_j for every j of the vocabulary (E[c_j / K] = r_j; ids never drawn have a_j = 0 = p_j - p_j in
//     expectation), so a loss LINEAR in the targets has the full forward KL's expectation. The loss is
//       L = sum_S a_j log(a_j / q_j),   dL/dz_j = A q_j - a_j on S, A q_j off S,   A = sum_S a_j,
//     and its gradient, linear in a, is an unbiased estimate of the full forward KL's gradient q - p (E[A] = 1).
//     At t = 1 the weights are the empirical frequencies c_j / K (A = 1 exactly) and L = KL(c / K || q); at t != 1
//     the weights are not renormalised (a renormalised, self-normalised estimate a / A would be biased at finite
//     K). The value of L differs from an unbiased estimate of KL(p || q) by a term that does not depend on the
//     student (the targets' own sum_S a_j log a_j against sum_j p_j log p_j). No rest bucket: the weights are the
//     whole target, so k may exceed the number of distinct ids (the other slots are -inf).
//
// Temperature. The student is always z = x / T. The cache holds the teacher at ONE temperature and cannot be
// re-tempered exactly: the teacher's tail mass at T != 1 depends on logits it does not keep. So:
//   - ForwardKLRenormalized tempers the cached values exactly: softmax_S(l / T) = softmax_S(t / T) because l and
//     the teacher logits t differ by one constant per row.
//   - the rest-bucket kinds (ForwardKLRest, ReverseKL, Mixed) and the sampled targets take the cached distribution as
//   it is and need
//     either T = 1, or targets_at_temperature = true: the cache was written from log_softmax(t / T) at this T
//     (the teacher generator divides by T before its log-softmax), which keeps p_rest exact. Any other T is an
//     error rather than a silent re-tempering of the (k+1)-category distribution (p^(1/T) renormalised), which
//     is not the teacher at temperature T.
//   With targets_at_temperature the renormalized KL also takes the cached values as they are.
// The divergence is scaled by T^2 (scale_by_t_squared, Hinton et al. 2015), so dloss/dx = T^2 / T dL/dz.
//
// Hard labels. With kd_ratio < 1 the loss per token is kd_ratio * T^2 * KD + (1 - kd_ratio) * CE, where CE is
// the vocab-parallel cross-entropy of losses/cross_entropy.h (lse(x) - x_y at temperature 1, no smoothing) on
// the labels; its statistics ride the same two collectives (at T != 1 the raw logits get their own maximum and
// sum). Labels equal to ignore_index, and rows whose mask is 0, are masked: loss 0, gradient 0, not counted.
//
// Tensor parallelism: rank r owns global columns [r V_local, (r + 1) V_local); it finds the members of S in that
// range itself (k > V_local, or every member on one shard, are fine). Per row: one local pass (the k teacher
// values, the owned members of S gathered, one read of the shard for the rest bucket), ONE MAX all-reduce of the
// packed maxima [rows, 3], ONE packed SUM all-reduce [rows, 7]; the backward needs no collective (every global
// row statistic is saved).
//
// -inf: a teacher -inf is an impossible token (p_j = 0, its term is 0); teacher mass on a student -inf makes the
// forward KL +inf (gradient finite), student mass on a teacher -inf makes the reverse KL +inf (gradient NaN, as
// PyTorch). A renormalized row whose k log-probs are all -inf has no distribution over S and gives NaN; masked
// rows never do.
#include <memory>
#include <optional>

#include "losses/cross_entropy.h"
#include "losses/kernels/topk_distillation_kernels.h"
#include "parallel/comm/communicator.h"

namespace retort::losses {

enum class TopkDivergence { ForwardKLRenormalized, ForwardKLRest, ReverseKL, Mixed, ForwardKLSampled };

struct TopkDistillationOptions {
  TopkDivergence divergence = TopkDivergence::ForwardKLRest;
  double forward_weight = 0.5;  // Mixed: the forward KL's weight, in [0, 1]
  double temperature = 1.0;     // > 0; see "Temperature" above
  // The cached log-probs were computed at `temperature` (log_softmax(teacher logits / T)): use them as they are.
  bool targets_at_temperature = false;
  bool scale_by_t_squared = true;         // the divergence x T^2
  double kd_ratio = 1.0;                  // in [0, 1]: kd_ratio * KD + (1 - kd_ratio) * CE on the labels
  int ignore_index = -100;                // rows whose label is ignore_index are masked (when labels are given)
  Reduction reduction = Reduction::Mean;  // Mean: over the valid (not masked) rows of this call
  // When set, the loss is the sum divided by this (a global token count, for gradient accumulation and data
  // parallelism); it overrides `reduction`.
  std::optional<double> normalizer;
  // The tp group the vocabulary is split over; by default the one on student.sharding() (last dim).
  std::shared_ptr<Communicator> group;
};

// The teacher's side of a batch, from the top-k cache; the same on every rank of the group.
struct TopkTargets {
  Tensor indices;   // i32 [..., k] (or [rows, k]): GLOBAL vocabulary ids, distinct within a row
  Tensor logprobs;  // [..., k] f32 or bf16 (f64 on the CPU): log p_j over the full vocabulary, -inf allowed
  Tensor labels;    // i32 [...] (or [rows]) or undefined: the CE target and the ignore_index mask
  Tensor mask;      // i32 [...] (or [rows]) or undefined: 0 masks the row
};

// student [..., V_local] (f32 or bf16, CPU or CUDA; f64 on the CPU). The targets may live on the host or on the
// student's device; where a host copy exists (host targets, or CPU logits) the ids are checked there: in
// [0, V), distinct within a row, labels in [0, V) or ignore_index. Ids that are already on the GPU are trusted
// (checking them would wait for the stream): the kernels never read outside the shard, but an id outside the
// vocabulary counts as a member of S on no rank, and a repeated one twice. The CUDA kernels take k <= 2048. Returns a
// 0-dim f32 tensor (f64 for f64 student logits), equal on every rank, recorded as one autograd node whose backward
// writes each rank's exact LOCAL gradient wrt the student logits, in their dtype, with no collective. The mean's row
// count stays on the device; an all-masked batch gives 0 and zero gradients.
Tensor topk_distillation_loss(const Tensor& student, const TopkTargets& targets,
                              const TopkDistillationOptions& options = {});

// The checks topk_distillation_loss makes of host targets (teacher ids in [0, vocab_total) and distinct within a row;
// labels in the vocabulary or ignore_index where the loss reads them), for a caller that moves the targets to the
// device itself: a graphed training step, whose recorded loss cannot stop on a bad id. Throws the loss's errors.
void check_topk_targets_on_host(const TopkTargets& targets, int64_t vocab_total,
                                const TopkDistillationOptions& options);

// ---- the same loss without the tape, for a fused trainer that owns its gradient buffers ----------------------

// What the backward needs besides the student logits (all of it on the student's device).
struct TopkDistillationSaved {
  Tensor indices, logprobs;  // [N, k]
  Tensor labels, mask;       // [N] or undefined
  Tensor row_stats;          // [N, kernels::topk::kRowColumns] (f32; f64 for f64 student logits)
  Tensor denominator;        // []: the valid-row count (at least 1), 1, or the normalizer
  kernels::topk::TopkParams params;
  int64_t vocab_valid = 0;  // the student shard's real columns (fewer than its width when the shard is padded)
};

struct TopkDistillationForward {
  Tensor loss;  // [] f32 (f64 for f64 student logits), not recorded on the tape
  TopkDistillationSaved saved;
};

// The forward (both collectives included) of topk_distillation_loss(), recording nothing.
TopkDistillationForward topk_distillation_forward(const Tensor& student, const TopkTargets& targets,
                                                  const TopkDistillationOptions& options = {});

// grad_student (student's shape and device) = grad_output * dloss/dstudent, or += with accumulate. grad_student
// may be f32 or bf16 for f32 / bf16 student logits (an f32 accumulator for bf16 logits is fine), f64 for f64
// logits, or the student tensor itself (the gradient then overwrites the logits: every column is read before it
// is written). grad_output: a one-element tensor, best on the student's device (then nothing waits for the host), or
// undefined for 1. Masked rows get 0 (are left alone when accumulating). No collective.
void topk_distillation_backward(const Tensor& student, const TopkDistillationSaved& saved, const Tensor& grad_output,
                                Tensor& grad_student, bool accumulate = false);

}  // namespace retort::losses
