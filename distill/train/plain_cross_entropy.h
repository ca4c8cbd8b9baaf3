#pragma once
// The labels' plain cross-entropy (no tape, no smoothing): the "ce" every student reports beside its KD loss, so
// that a distilled student and a label-only one are compared on the same number.
#include "core/tensor/tensor.h"

namespace retort::distill {

double plain_cross_entropy(const Tensor& logits, const Tensor& labels, int ignore_index);

}  // namespace retort::distill
