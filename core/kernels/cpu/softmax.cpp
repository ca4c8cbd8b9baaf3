#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void softmax_forward(const Tensor& x_in, Tensor& y_in) {
  Tensor x = widen(x_in);
  OutputSlot slot(y_in);
  Tensor& y = slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) softmax_row(x.data<T>() + r * cols, y.data<T>() + r * cols, cols);
  });
  slot.finish();
}

void softmax_backward(const Tensor& y_in, const Tensor& dy_in, Tensor& dx_in) {
  Tensor y = widen(y_in), dy = widen(dy_in);
  OutputSlot slot(dx_in);
  Tensor& dx = slot.get();
  dispatch_real(y.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(y), rows = leading_rows(y);
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* yr = y.data<T>() + r * cols;
      const T* dyr = dy.data<T>() + r * cols;
      T* dxr = dx.data<T>() + r * cols;
      double dot = 0;
      for (int64_t j = 0; j < cols; ++j) dot += static_cast<double>(yr[j]) * dyr[j];
      for (int64_t j = 0; j < cols; ++j) dxr[j] = yr[j] * (dyr[j] - T(dot));
    }
  });
  slot.finish();
}

}  // namespace retort::kernels::cpu
