#include "core/tensor/slicing.h"

#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort {
namespace {

int normalised(int dim, const Tensor& x, const char* what) {
  const int d = dim < 0 ? dim + x.ndim() : dim;
  RETORT_CHECK(d >= 0 && d < x.ndim(), "{}: dim {} is out of range for {}", what, dim, x.describe());
  return d;
}

// Elements before and after dim, as the 2-D view every slice along dim is a column band of.
std::pair<int64_t, int64_t> outer_inner(const Shape& shape, int d) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= shape[i];
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  return {outer, inner};
}

}  // namespace

Tensor narrow_copy(const Tensor& x, int dim, int64_t start, int64_t length) {
  const int d = normalised(dim, x, "narrow_copy");
  RETORT_CHECK(start >= 0 && length >= 0 && start + length <= x.size(d),
               "narrow_copy: [{}, {}) is outside dim {} of {}", start, start + length, d, x.describe());
  Shape shape = x.shape();
  shape[d] = length;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  const auto [outer, inner] = outer_inner(x.shape(), d);
  const size_t elem = dtype_size(x.dtype());
  device_runtime::copy_2d(out.raw_data(), length * inner * elem,
                          static_cast<const char*>(x.raw_data()) + start * inner * elem, x.size(d) * inner * elem,
                          length * inner * elem, outer, x.device());
  return out;
}

void copy_into_narrow(Tensor& dst, int dim, int64_t start, const Tensor& src) {
  const int d = normalised(dim, dst, "copy_into_narrow");
  RETORT_CHECK(src.ndim() == dst.ndim() && src.dtype() == dst.dtype() && src.device() == dst.device(),
               "copy_into_narrow: {} does not fit into {}", src.describe(), dst.describe());
  for (int i = 0; i < dst.ndim(); ++i)
    RETORT_CHECK(i == d ? start >= 0 && start + src.size(i) <= dst.size(i) : src.size(i) == dst.size(i),
                 "copy_into_narrow: {} does not fit into {} at {} along dim {}", src.describe(), dst.describe(), start,
                 d);
  const auto [outer, inner] = outer_inner(dst.shape(), d);
  const size_t elem = dtype_size(dst.dtype());
  device_runtime::copy_2d(static_cast<char*>(dst.raw_data()) + start * inner * elem, dst.size(d) * inner * elem,
                          src.raw_data(), src.size(d) * inner * elem, src.size(d) * inner * elem, outer, dst.device());
}

Tensor concat(const std::vector<Tensor>& parts, int dim) {
  RETORT_CHECK(!parts.empty(), "concat: no tensors");
  const int d = normalised(dim, parts[0], "concat");
  Shape shape = parts[0].shape();
  shape[d] = 0;
  for (const auto& p : parts) shape[d] += p.size(d);
  Tensor out = Tensor::empty(shape, parts[0].dtype(), parts[0].device());
  int64_t start = 0;
  for (const auto& p : parts) {
    copy_into_narrow(out, d, start, p);
    start += p.size(d);
  }
  return out;
}

}  // namespace retort
