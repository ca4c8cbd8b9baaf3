#pragma once
// What the CPU passes of every vocab-parallel loss (cross-entropy, distribution, top-k) do the same way: when a
// batch is worth a thread team, bringing a second input to the student's compute type, the reduction of the
// summed row losses, and the backward's scale. Header-only.
#include <algorithm>
#include <cstdint>

#include "core/tensor/tensor.h"
#include "losses/kernels/cross_entropy_kernels.h"  // kernels::Reduction

namespace retort::losses::kernels::cpu_rows {

// Rows of a few thousand logits already pay for a thread team.
inline bool worth_threads(int64_t rows, int64_t vocab) {
  return rows > 1 && rows * vocab > 16384;
}

// `t` (teacher logits, cached log-probs) in the compute type of the already widened student.
inline Tensor like(const Tensor& t, const Tensor& student) {
  return t.dtype() == student.dtype() ? t : t.to(student.dtype());
}

// Stores the loss (the sum of the valid rows' losses over the denominator) and the denominator itself, which
// the backward divides by: 1 (sum), the valid rows (mean; at least 1), or the given normalizer.
template <typename T>
void store_reduced(double total, int64_t valid, Reduction reduction, double normalizer, Tensor& loss,
                   Tensor& denominator) {
  double denom = 1.0;
  if (reduction == Reduction::Mean) denom = static_cast<double>(std::max<int64_t>(valid, 1));
  if (reduction == Reduction::Normalizer) denom = normalizer;
  loss.data<T>()[0] = static_cast<T>(total / denom);
  denominator.data<T>()[0] = static_cast<T>(denom);
}

// d loss / d (sum of the row losses): the incoming gradient (1 when undefined) over the stored denominator.
inline double backward_scale(const Tensor& grad_output, const Tensor& denominator) {
  return (grad_output.defined() ? grad_output.item() : 1.0) / denominator.item();
}

}  // namespace retort::losses::kernels::cpu_rows
