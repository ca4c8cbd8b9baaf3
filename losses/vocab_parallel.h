#pragma once
// What every vocab-parallel loss does the same way before its kernels run: find the tp group the vocabulary
// is split over, check that per-row labels fit the logits, and turn the reduction options into the kernels'
// form. Header-only. (cross_entropy.cpp still has private copies of these: vocab_group, check_target_shape
// and the reduction part of params_for; they can switch over to this header.)
#include <cmath>
#include <memory>
#include <optional>
#include <string_view>

#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "parallel/comm/communicator.h"

namespace retort::losses::vocab_parallel {

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

}  // namespace retort::losses::vocab_parallel
