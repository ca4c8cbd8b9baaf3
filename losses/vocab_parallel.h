#pragma once
// What every vocab-parallel loss (cross-entropy, distribution, top-k distillation) does the same way around its
// kernels: find the tp group the vocabulary is split over, check the logits, per-row labels and gradient buffers,
// turn the reduction options into the kernels' form, pick the backend's kernels, and run the forward's two
// collectives. Header-only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string_view>

#include "core/tensor/slicing.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "parallel/comm/communicator.h"
#include "parallel/tp/vocab_shard.h"

// Every loss's kernels have the same signatures on both backends (ns::cpu and ns::cuda): pick by the device of
// the logits.
#ifdef RETORT_WITH_CUDA
#define RETORT_VOCAB_DISPATCH(ns, device, fn, ...) \
  ((device).is_cuda() ? ns::cuda::fn(__VA_ARGS__) : ns::cpu::fn(__VA_ARGS__))
#else
#define RETORT_VOCAB_DISPATCH(ns, device, fn, ...) ns::cpu::fn(__VA_ARGS__)
#endif

namespace retort::losses::vocab_parallel {

using tp::real_columns;
using tp::vocab_shard;
using tp::VocabShard;

// `what` names the logits in messages ("logits", "student logits").
inline void check_logits(const Tensor& logits, std::string_view op, std::string_view what) {
  RETORT_INPUT_CHECK(logits.defined() && logits.ndim() >= 1 && logits.size(-1) > 0 && is_floating(logits.dtype()),
                     "{}: {} {} need a floating dtype and a non-empty vocabulary (last) dim", op, what,
                     logits.defined() ? logits.describe() : "(undefined)");
}

// Without a CUDA backend only host logits can be served.
inline void check_backend([[maybe_unused]] const Tensor& logits, [[maybe_unused]] std::string_view op,
                          [[maybe_unused]] std::string_view what) {
#ifndef RETORT_WITH_CUDA
  RETORT_CHECK(logits.device().is_cpu(), "{}: {} {} are on a GPU, but this build has no CUDA backend", op, what,
               logits.describe());
#endif
}

// A gradient buffer has the logits' shape and device and a floating dtype; `stage` ("_backward",
// "_with_grad") completes the op's name in the message.
inline void check_grad_buffer(const Tensor& logits, const Tensor& grad, std::string_view op, std::string_view stage,
                              std::string_view what) {
  RETORT_INPUT_CHECK(grad.shape() == logits.shape() && grad.device() == logits.device() && is_floating(grad.dtype()),
                     "{}{}: the gradient buffer {} does not match {} {}", op, stage, grad.describe(), what,
                     logits.describe());
}

// The group to reduce over: `override` when given, else the one on logits.sharding() when the logits are split
// on their last dim. Null when no collective is needed (no group, a group of one rank, replicated logits).
inline std::shared_ptr<Communicator> group_of(const Tensor& logits, const std::shared_ptr<Communicator>& override,
                                              std::string_view op) {
  if (override) return override->size() > 1 ? override : nullptr;
  const ShardingSpec& spec = logits.sharding();
  if (!spec.group || spec.group->size() == 1 || spec.partition_dim < 0) return nullptr;  // replicated: local
  RETORT_INPUT_CHECK(spec.partition_dim == logits.ndim() - 1 && spec.blocks == 1,
                     "{}: logits {} are sharded on dim {} (in {} blocks), not on the vocabulary (the last dim, one "
                     "block); pass options.group to override",
                     op, logits.describe(), spec.partition_dim, spec.blocks);
  return spec.group;
}

// Runs `backward(grad_of_real_columns, accumulate)` and leaves `grad` [N, width] holding its result in the real
// columns and zero (or what it held, when accumulating) in the padding.
template <typename Backward>
void backward_on_real_columns(Tensor& grad, const VocabShard& s, bool accumulate, Backward&& backward) {
  if (!s.padded()) {
    backward(grad, accumulate);
    return;
  }
  Tensor real = accumulate ? narrow_copy(grad, 1, 0, s.valid)
                           : Tensor::empty({grad.size(0), s.valid}, grad.dtype(), grad.device());
  backward(real, accumulate);
  if (!accumulate) grad.copy_(Tensor::zeros(grad.shape(), grad.dtype(), grad.device()));
  copy_into_narrow(grad, 1, 0, real);
}

// One i32 value per row: the logits' leading dims, or those rows flattened.
inline void check_row_labels(const Tensor& logits, const Tensor& labels, std::string_view op, std::string_view what) {
  Shape leading = logits.shape();
  leading.pop_back();
  const bool flat = labels.ndim() == 1 && labels.numel() == shape_numel(leading);
  RETORT_INPUT_CHECK(labels.dtype() == DType::I32 && (labels.shape() == leading || flat),
                     "{}: {} {} do not match logits {}: one i32 id per row, shape {}", op, what, labels.describe(),
                     logits.describe(), shape_str(leading));
}

struct KernelReduction {
  kernels::Reduction reduction = kernels::Reduction::Mean;
  double normalizer = 1.0;
};

// A normalizer, when set, overrides the reduction (the loss is the sum divided by it).
inline KernelReduction kernel_reduction(Reduction reduction, const std::optional<double>& normalizer,
                                        std::string_view op) {
  KernelReduction out;
  out.reduction = reduction == Reduction::Sum ? kernels::Reduction::Sum : kernels::Reduction::Mean;
  if (normalizer) {
    RETORT_INPUT_CHECK(std::isfinite(*normalizer) && *normalizer > 0, "{}: the normalizer must be positive, got {}", op,
                       *normalizer);
    out.reduction = kernels::Reduction::Normalizer;
    out.normalizer = *normalizer;
  }
  return out;
}

// Per-row statistics are f32, or f64 for f64 logits (the CPU reference path).
inline DType stat_dtype(const Tensor& logits) {
  return logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
}

// The forward's two collectives over `group`: the global row maxima (MAX), then the partial sums, rescaled by
// rescale(global_max) from this rank's maxima to the global ones, summed (SUM). Returns the global maxima; without
// a group (or rows) they are the local ones and nothing runs. Every rank has the same rows, so all of them skip
// (or run) the collectives together.
//
// The MAX all-reduce also carries each rank's shard width and vocabulary (and their negatives): every rank must
// hold the same width of the same V, or the ids would be counted wrong; a mismatch is an error with the numbers.
inline constexpr int64_t kShardCheckValues = 4;  // width, -width, V, -V after the row maxima of the MAX all-reduce

template <typename Rescale>
Tensor reduce_partials(const std::shared_ptr<Communicator>& group, int64_t rows, const Tensor& local_max,
                       Tensor& partials, const VocabShard& shard, std::string_view op, Rescale&& rescale) {
  if (!group || rows <= 0) return local_max;
  const double w = static_cast<double>(shard.width), v = static_cast<double>(shard.total);
  const Tensor check = Tensor::from_doubles({w, -w, v, -v}, {kShardCheckValues}, local_max.dtype(), local_max.device());
  Tensor packed = concat({local_max.view({-1}), check}, 0);
  group->all_reduce(packed, ReduceOp::Max);
  const std::vector<double> seen = narrow_copy(packed, 0, local_max.numel(), kShardCheckValues).to_doubles();
  RETORT_INPUT_CHECK(seen[0] == w && -seen[1] == w && seen[2] == v && -seen[3] == v,
                     "{}: the ranks' vocabulary shards disagree: widths from {} to {} columns, vocabularies from {} to "
                     "{} ids (this rank, {} of {}: {} of {}); every rank must hold an equal shard of the same "
                     "vocabulary (ceil(V / tp) columns, the last one padded)",
                     op, -seen[1], seen[0], -seen[3], seen[2], group->rank(), group->size(), shard.width, shard.total);
  Tensor global_max = narrow_copy(packed, 0, 0, local_max.numel()).view(local_max.shape());
  rescale(global_max);
  group->all_reduce(partials, ReduceOp::Sum);
  return global_max;
}

// The backward's incoming gradient of the scalar loss (1 when undefined) in the statistics' dtype on `device`.
inline Tensor scalar_grad_output(const Tensor& grad_output, DType stats, Device device, std::string_view op) {
  Tensor g = grad_output.defined() ? grad_output : Tensor::full({}, 1.0, stats, device);
  RETORT_INPUT_CHECK(g.numel() == 1, "{}_backward: grad_output {} must hold one value", op, g.describe());
  return g.to(stats).to(device);
}

}  // namespace retort::losses::vocab_parallel
