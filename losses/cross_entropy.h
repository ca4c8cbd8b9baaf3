#pragma once
// Cross-entropy from labels over vocab-sharded logits (Megatron's vocab-parallel cross-entropy, with label
// smoothing over the GLOBAL vocabulary and the tensor-parallel smoothing bug fixed). The exact math and edge
// cases are in the reference losses.md; in short, per row:
//   lse = m + log S over the whole vocabulary, from a MAX all-reduce of the shard maxima and ONE packed SUM
//   all-reduce of (S, target logit, sum of shifted logits): O(tokens) bytes, never the vocabulary;
//   loss = (1 - s)(lse - x_y) - s (sum_j (x_j - m) / V - log S) + z lse^2
//   dloss/dx_j = q_j (1 + 2 z lse) - (1 - s)[j == y] - s / V     (no collective: lse is saved)
// with s = alpha V / (V - 1) (Megatron: 1 - alpha on the label, alpha / (V - 1) on the others) or s = alpha
// (PyTorch: 1 - alpha + alpha / V on the label, alpha / V on the others).
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
  double label_smoothing = 0.0;
  LabelSmoothingConvention smoothing_convention = LabelSmoothingConvention::Megatron;
  double z_loss = 0.0;  // + z_loss * lse^2 per valid token
  // The tp group the vocabulary is split over; by default the one on logits.sharding() (last dim).
  std::shared_ptr<Communicator> group;
};

// logits [..., V_local] (f32 or bf16, CPU or CUDA; f64 on the CPU), targets i32 [...] of GLOBAL ids, the same on
// every rank of the group; rank r owns ids [r V_local, (r + 1) V_local). Returns a 0-dim f32 tensor, equal on
// every rank, recorded as one autograd node whose backward writes each rank's exact LOCAL gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

}  // namespace retort::losses
