#pragma once
// Copies of slices along any dim, and their inverse. Tensors are contiguous row-major, so a slice along dim d
// is a pitched 2-D block: outer = prod(shape[:d]) rows of length(d) * inner elements. No autograd: the TP
// regions in parallel/ build differentiable ops from these.
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {

// A new tensor holding x's elements [start, start + length) along dim (negative dims count from the end).
Tensor narrow_copy(const Tensor& x, int dim, int64_t start, int64_t length);

// Writes src into dst's elements [start, start + src.size(dim)) along dim; every other dim must match.
void copy_into_narrow(Tensor& dst, int dim, int64_t start, const Tensor& src);

// The concatenation of parts along dim (same dtype, device and every other dim).
Tensor concat(const std::vector<Tensor>& parts, int dim);

}  // namespace retort
