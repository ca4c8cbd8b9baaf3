#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {

// The GPU kernel ranks float32 values by an order-preserving unsigned key of their bits; the CPU ranks by the
// same key so both backends agree even on the corner cases (-0 vs +0, NaN).
uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;  // -0 ranks equal to +0
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// f64 rows (the reference path) compare as numbers.
double order_key(double v) {
  return v;
}

template <typename T>
double row_logsumexp(const T* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x[j]));
  if (m == -std::numeric_limits<double>::infinity()) return m;  // no mass at all, and -inf - -inf is NaN
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(x[j]) - m);
  return m + std::log(s);
}

}  // namespace

void topk(const Tensor& x_in, int64_t index_base, const Tensor& ids, Tensor& values, Tensor& indices, Tensor& row_lse) {
  Tensor x = widen(x_in);
  const int64_t cols = last_dim(x), rows = leading_rows(x), k = values.size(-1);
  dispatch_real(x.dtype(), [&]<typename T>() {
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data<T>() + r * cols;
      std::vector<int32_t> order(static_cast<size_t>(cols));
      std::iota(order.begin(), order.end(), 0);
      // partial_sort keeps the cost at O(cols log k); the comparator is a strict total order (value, then
      // column), so the selected set and its order are unique.
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        const auto ka = order_key(xr[a]), kb = order_key(xr[b]);
        return ka != kb ? ka > kb : a < b;
      });
      float* vr = values.data<float>() + r * k;
      int32_t* ir = indices.data<int32_t>() + r * k;
      const int32_t* idr = ids.defined() ? ids.data<int32_t>() + r * cols : nullptr;
      for (int64_t i = 0; i < k; ++i) {
        const int32_t c = order[static_cast<size_t>(i)];
        vr[i] = static_cast<float>(xr[c]);
        ir[i] = idr ? idr[c] : static_cast<int32_t>(index_base + c);
      }
      if (row_lse.defined()) row_lse.data<float>()[r] = static_cast<float>(row_logsumexp(xr, cols));
    }
  });
}

}  // namespace retort::kernels::cpu
