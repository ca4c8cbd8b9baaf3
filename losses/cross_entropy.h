#pragma once
// Cross-entropy from labels over vocab-sharded logits (Megatron's vocab-parallel cross-entropy, with label
// smoothing over the GLOBAL vocabulary and the tensor-parallel smoothing bug fixed). The exact math and edge
// cases are in the reference losses.md; in short, per row:
//   lse = m + log S over the whole vocabulary, from a MAX all-reduce of the shard maxima and ONE packed SUM
//   all-reduce of (S, target logit[, sum of shifted logits]): O(tokens) bytes, never the vocabulary;
//   loss = (1 - s)(lse - x_y) - s (sum_j (x_j - m) / V - log S) + z lse^2
//   dloss/dx_j = q_j (1 + 2 z lse) - (1 - s)[j == y] - s / V     (no collective: lse is saved)
// with s = alpha V / (V - 1) (Megatron: 1 - alpha on the label, alpha / (V - 1) on the others) or s = alpha
// (PyTorch: 1 - alpha + alpha / V on the label, alpha / V on the others).
//
// The shards are equal by construction (V = V_local x group size), so a vocabulary that does not divide never
// reaches this op: a model pads its vocabulary with real columns before sharding it.
// -inf logits are impossible tokens: probability exactly 0 and never a NaN, also when a rank's whole shard is
// -inf. With label smoothing the target gives every token some mass, so a -inf logit makes the loss +inf (as
// PyTorch does) while the gradient stays finite. A valid row whose every logit is -inf has no distribution
// and gives NaN (as in PyTorch); ignored rows never produce one.
#include <memory>
#include <optional>

#include "parallel/comm/communicator.h"

namespace retort::losses {

enum class LabelSmoothingConvention { Megatron, PyTorch };
enum class Reduction { Mean, Sum };

struct CrossEntropyOptions {
  int ignore_index = -100;
  Reduction reduction = Reduction::Mean;  // Mean: over the valid (not ignored) tokens of this call
  // When set, the loss is the sum divided by this (a global token count, for gradient accumulation and data
  // parallelism); it overrides `reduction`.
  std::optional<double> normalizer;
  double label_smoothing = 0.0;  // alpha, in [0, 1)
  LabelSmoothingConvention smoothing_convention = LabelSmoothingConvention::Megatron;
  double z_loss = 0.0;  // + z_loss * lse^2 per valid token
  // The tp group the vocabulary is split over; by default the one on logits.sharding() (last dim).
  std::shared_ptr<Communicator> group;
};

// logits [..., V_local] (f32 or bf16, CPU or CUDA; f64 on the CPU), targets i32 [...] of GLOBAL ids, the same on
// every rank of the group; rank r owns ids [r V_local, (r + 1) V_local). Without a group, or with a group of one
// rank, no collective runs. Returns a 0-dim f32 tensor (f64 for f64 logits), equal on every rank, recorded as
// one autograd node whose backward writes each rank's exact LOCAL gradient in the logits' dtype.
// The mean's token count stays on the device; an all-ignored batch gives 0 and zero gradients. Targets on the
// host are validated on the host; targets already on a GPU are checked by the kernel, which costs one wait
// for the stream at the end of the forward.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// ---- the same loss without the tape, for a fused trainer that owns its gradient buffers ----------------------

// What the backward needs besides the logits and the targets (all of it on the logits' device).
struct CrossEntropySaved {
  Tensor targets;            // i32 [N], on the logits' device
  Tensor lse;                // [N] global log-sum-exp per row (f32; f64 for f64 logits)
  Tensor denominator;        // []: the valid-token count (at least 1), 1, or the normalizer
  int64_t vocab_start = 0;   // first global id of this rank's shard
  int64_t vocab_global = 0;  // V
  int64_t vocab_valid = 0;   // this shard's real columns (fewer than its width when the shard is padded)
  int ignore_index = -100;
  double smoothing = 0.0;  // the effective s above, for either convention
  double z_loss = 0.0;
};

struct CrossEntropyForward {
  Tensor loss;  // [] f32 (f64 for f64 logits), not recorded on the tape
  CrossEntropySaved saved;
};

// The forward (both collectives included) of cross_entropy(), recording nothing.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          const CrossEntropyOptions& options = {});

// grad_logits (logits' shape and device) = grad_output * dloss/dlogits, or += with accumulate. grad_logits
// may be f32 or bf16 for f32 / bf16 logits (an f32 accumulator for bf16 logits is fine), f64 for f64 logits.
// grad_output: a one-element tensor, best on the logits' device (then nothing waits for the host), or
// undefined for 1. Ignored rows get 0 (are left alone when accumulating). No collective.
void cross_entropy_backward(const Tensor& logits, const CrossEntropySaved& saved, const Tensor& grad_output,
                            Tensor& grad_logits, bool accumulate = false);

// Loss and gradient in one call, the output gradient taken as 1: grad_logits = (or += with accumulate)
// dloss/dlogits; grad_logits may be the logits tensor itself (the gradient overwrites the logits in place) or any
// buffer of their shape (f32 or bf16). Returns the loss as cross_entropy_forward() does. For a fused trainer that
// runs the loss on the LM head's logits and back-propagates grad_logits.
// On one GPU (no tp group) of compute capability 9.0+, with a vocabulary divisible by 8 that fits the shared
// memory of a cluster of 8 blocks (up to 409600 bf16 columns) and 16-byte aligned buffers, the logits are read
// ONCE: the row stays on chip between its statistics and its gradient (losses/kernels/row_resident_kernels.h).
// Elsewhere it is cross_entropy_forward() then cross_entropy_backward().
Tensor cross_entropy_with_grad(const Tensor& logits, const Tensor& targets, Tensor& grad_logits,
                               const CrossEntropyOptions& options = {}, bool accumulate = false);

}  // namespace retort::losses
