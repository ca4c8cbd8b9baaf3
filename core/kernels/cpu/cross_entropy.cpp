#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void cross_entropy_forward(const Tensor& logits_in, const Tensor& targets, int ignore_index, Tensor& row_loss,
                           Tensor& lse) {
  Tensor logits = widen(logits_in);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] != ignore_index && (t[r] < 0 || t[r] >= vocab))
      throw InputError(fmt::format("target {} at row {} is outside the vocabulary of {} (ignore_index is {})", t[r], r,
                                   vocab, ignore_index));
  dispatch_real(logits.dtype(), [&]<typename T>() {
    using Row = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
#pragma omp parallel for if (rows * vocab > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      Row x(logits.data<T>() + r * vocab, vocab);
      // Eigen's exp is vectorised; the sum of up to ~1e6 terms each <= 1 keeps float precision here.
      const T m = x.maxCoeff();
      const double l = static_cast<double>(m) + std::log(static_cast<double>((x - m).exp().sum()));
      store_stat(lse, r, l);
      store_stat(row_loss, r, t[r] == ignore_index ? 0.0 : l - static_cast<double>(x[t[r]]));
    }
  });
}

void cross_entropy_backward(const Tensor& logits_in, const Tensor& targets, const Tensor& lse, int ignore_index,
                            float grad_scale, Tensor& dlogits_in) {
  Tensor logits = widen(logits_in);
  OutputSlot slot(dlogits_in);
  Tensor& dlogits = slot.get();
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int32_t* t = targets.data<int32_t>();
  dispatch_real(logits.dtype(), [&]<typename T>() {
#pragma omp parallel for if (rows * vocab > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = logits.data<T>() + r * vocab;
      T* g = dlogits.data<T>() + r * vocab;
      if (t[r] == ignore_index) {
        std::fill_n(g, vocab, T(0));
        continue;
      }
      const T l = static_cast<T>(load_stat(lse, r));
      Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> xr(x, vocab);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> gr(g, vocab);
      // exp(-inf) must be exactly 0 (Eigen's vectorised exp would give a denormal).
      gr = (xr == -std::numeric_limits<T>::infinity()).select(T(0), T(grad_scale) * (xr - l).exp());
      g[t[r]] -= T(grad_scale);
    }
  });
  slot.finish();
}

}  // namespace retort::kernels::cpu
