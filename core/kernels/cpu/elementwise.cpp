#include <cmath>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void fill(Tensor& x, double value) {
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::F32:
      std::fill_n(x.data<float>(), n, static_cast<float>(value));
      break;
    case DType::F64:
      std::fill_n(x.data<double>(), n, value);
      break;
    case DType::BF16:
      std::fill_n(x.data<BFloat16>(), n, BFloat16(static_cast<float>(value)));
      break;
    case DType::I32:
      std::fill_n(x.data<int32_t>(), n, static_cast<int32_t>(value));
      break;
  }
}

void cast(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  auto load = [&](int64_t i) -> double {
    switch (x.dtype()) {
      case DType::F32:
        return x.data<float>()[i];
      case DType::F64:
        return x.data<double>()[i];
      case DType::BF16:
        return static_cast<float>(x.data<BFloat16>()[i]);
      case DType::I32:
        return x.data<int32_t>()[i];
    }
    return 0;
  };
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const double v = load(i);
    switch (out.dtype()) {
      case DType::F32:
        out.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::F64:
        out.data<double>()[i] = v;
        break;
      case DType::BF16:
        out.data<BFloat16>()[i] = BFloat16(static_cast<float>(v));
        break;
      case DType::I32:
        out.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
    }
  }
}

void add(const Tensor& a_in, const Tensor& b_in, Tensor& out_in, float alpha, float beta) {
  Tensor a = widen(a_in), b = widen(b_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) po[i] = T(alpha) * pa[i] + T(beta) * pb[i];
  });
  slot.finish();
}

void add_bias(const Tensor& x_in, const Tensor& bias_in, Tensor& out_in) {
  Tensor x = widen(x_in), bias = widen(bias_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) po[r * cols + c] = px[r * cols + c] + pb[c];
  });
  slot.finish();
}

void sum_rows(const Tensor& x_in, Tensor& out_in, float beta) {
  Tensor x = widen(x_in);
  OutputSlot slot(out_in, /*keep_contents=*/beta != 0.0f);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    ConstMatrixMap<T> m(x.data<T>(), rows, cols);
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> o(out.data<T>(), cols);
    if (beta == 0.0f) {
      o = m.colwise().sum();
    } else {
      o = T(beta) * o + m.colwise().sum();
    }
  });
  slot.finish();
}

void mul(const Tensor& a_in, const Tensor& b_in, Tensor& out_in) {
  Tensor a = widen(a_in), b = widen(b_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] * pb[i];
  });
  slot.finish();
}

void scale(const Tensor& x_in, float s, Tensor& out_in) {
  Tensor x = widen(x_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) po[i] = T(s) * px[i];
  });
  slot.finish();
}

namespace {
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
}  // namespace

void gelu_forward(const Tensor& x_in, Tensor& y_in) {
  Tensor x = widen(x_in);
  OutputSlot slot(y_in);
  Tensor& y = slot.get();
  dispatch_real(y.dtype(), [&]<typename T>() {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const int64_t n = y.numel();
    // Chunks of the flat array in parallel; Eigen vectorises tanh within each.
    constexpr int64_t kChunk = 16384;
#pragma omp parallel for if (n > kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t len = std::min(kChunk, n - c0);
      Eigen::Map<const Array> v(x.data<T>() + c0, len);
      Eigen::Map<Array> out(y.data<T>() + c0, len);
      out = T(0.5) * v * (T(1) + (T(kGeluC) * (v + T(kGeluA) * v.cube())).tanh());
    }
  });
  slot.finish();
}

void gelu_backward(const Tensor& x_in, const Tensor& dy_in, Tensor& dx_in) {
  Tensor x = widen(x_in), dy = widen(dy_in);
  OutputSlot slot(dx_in);
  Tensor& dx = slot.get();
  dispatch_real(dx.dtype(), [&]<typename T>() {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const int64_t n = dx.numel();
    constexpr int64_t kChunk = 16384;
#pragma omp parallel for if (n > kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t len = std::min(kChunk, n - c0);
      Eigen::Map<const Array> v(x.data<T>() + c0, len), g(dy.data<T>() + c0, len);
      Eigen::Map<Array> out(dx.data<T>() + c0, len);
      const Array t = (T(kGeluC) * (v + T(kGeluA) * v.cube())).tanh();
      const Array dt = T(kGeluC) * (T(1) + T(3 * kGeluA) * v.square());
      out = g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t.square()) * dt);
    }
  });
  slot.finish();
}

void sum(const Tensor& x_in, Tensor& out) {
  Tensor x = widen(x_in);
  dispatch_real(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    double total = 0;
    const int64_t n = x.numel();
#pragma omp parallel for reduction(+ : total) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) total += px[i];
    if (out.dtype() == DType::F64) {
      out.data<double>()[0] = total;
    } else {
      out.data<float>()[0] = static_cast<float>(total);
    }
  });
}

void sum_squares(const Tensor& x_in, Tensor& out) {
  Tensor x = widen(x_in);
  dispatch_real(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    double total = 0;
    const int64_t n = x.numel();
#pragma omp parallel for reduction(+ : total) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(px[i]) * px[i];
    if (out.dtype() == DType::F64) {
      out.data<double>()[0] = total;
    } else {
      out.data<float>()[0] = static_cast<float>(total);
    }
  });
}

}  // namespace retort::kernels::cpu
