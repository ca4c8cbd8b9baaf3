#pragma once
// What every vocab-parallel loss (cross-entropy, distribution, top-k distillation) does the same way around its
// kernels: find the tp group the vocabulary is split over, check the logits, per-row labels and gradient buffers,
// turn the reduction options into the kernels' form, pick the backend's kernels, and run the forward's two
// collectives. Header-only.
#include <cmath>
#include <memory>
#include <optional>
#include <string_view>

#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "parallel/comm/communicator.h"

// Every loss's kernels have the same signatures on both backends (ns::cpu and ns::cuda): pick by the device of
// the logits.
#ifdef RETORT_WITH_CUDA
#define RETORT_VOCAB_DISPATCH(ns, device, fn, ...) \
  ((device).is_cuda() ? ns::cuda::fn(__VA_ARGS__) : ns::cpu::fn(__VA_ARGS__))
#else
#define RETORT_VOCAB_DISPATCH(ns, device, fn, ...) ns::cpu::fn(__VA_ARGS__)
#endif

namespace retort::losses::vocab_parallel {

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
template <typename Rescale>
Tensor reduce_partials(const std::shared_ptr<Communicator>& group, int64_t rows, const Tensor& local_max,
                       Tensor& partials, Rescale&& rescale) {
  if (!group || rows <= 0) return local_max;
  Tensor global_max = local_max.clone();
  group->all_reduce(global_max, ReduceOp::Max);
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
