#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {
// Numerically stable softmax of one row; a row of all -inf gives zeros rather than NaN.
template <typename T>
void softmax_row(const T* x, T* y, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  if (m == -std::numeric_limits<T>::infinity()) {
    std::fill_n(y, n, T(0));
    return;
  }
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> xr(x, n);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> yr(y, n);
  // Eigen's vectorised exp clamps its argument, so exp(-inf) would come out as a denormal instead of 0:
  // masked entries are set to exactly 0 (denormals would also slow every later product down ~30x).
  yr = (xr == -std::numeric_limits<T>::infinity()).select(T(0), (xr - m).exp());
  yr *= T(1) / yr.sum();
}
}  // namespace

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

// Causal attention, one (batch, head) pair at a time: S = Q K^T / sqrt(d), P = softmax(S masked), O = P V.
void attention_forward(const Tensor& qkv_in, int n_head, Tensor& out_in, Tensor& probs_in) {
  Tensor qkv = widen(qkv_in);
  OutputSlot out_slot(out_in), probs_slot(probs_in);
  Tensor &out = out_slot.get(), &probs = probs_slot.get();
  dispatch_real(qkv.dtype(), [&]<typename T>() {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
    const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
    Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * Tn * D > 32768)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < n_head; ++h) {
        const T* base = qkv.data<T>() + b * Tn * 3 * C + h * D;
        ConstStridedMatrixMap<T> q(base, Tn, D, Eigen::OuterStride<>(3 * C));
        ConstStridedMatrixMap<T> k(base + C, Tn, D, Eigen::OuterStride<>(3 * C));
        ConstStridedMatrixMap<T> v(base + 2 * C, Tn, D, Eigen::OuterStride<>(3 * C));
        MatrixMap<T> p(probs.data<T>() + (b * n_head + h) * Tn * Tn, Tn, Tn);
        p.noalias() = scale * (q * k.transpose());
        // Row i attends to positions 0..i: softmax over those, exact zeros above the diagonal.
        for (int64_t i = 0; i < Tn; ++i) {
          softmax_row(p.row(i).data(), p.row(i).data(), i + 1);
          std::fill(p.row(i).data() + i + 1, p.row(i).data() + Tn, T(0));
        }
        StridedMatrixMap<T> o(out.data<T>() + b * Tn * C + h * D, Tn, D, Eigen::OuterStride<>(C));
        o.noalias() = p * v;
      }
    }
    Eigen::setNbThreads(0);
  });
  out_slot.finish();
  probs_slot.finish();
}

void attention_backward(const Tensor& dout_in, const Tensor& qkv_in, const Tensor& probs_in, int n_head,
                        Tensor& dqkv_in) {
  Tensor dout = widen(dout_in), qkv = widen(qkv_in), probs = widen(probs_in);
  OutputSlot slot(dqkv_in);
  Tensor& dqkv = slot.get();
  dispatch_real(qkv.dtype(), [&]<typename T>() {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
    const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
    Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * Tn * D > 32768)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t offset = b * Tn * 3 * C + h * D;
        const Eigen::OuterStride<> stride3(3 * C);
        ConstStridedMatrixMap<T> q(qkv.data<T>() + offset, Tn, D, stride3);
        ConstStridedMatrixMap<T> k(qkv.data<T>() + offset + C, Tn, D, stride3);
        ConstStridedMatrixMap<T> v(qkv.data<T>() + offset + 2 * C, Tn, D, stride3);
        StridedMatrixMap<T> dq(dqkv.data<T>() + offset, Tn, D, stride3);
        StridedMatrixMap<T> dk(dqkv.data<T>() + offset + C, Tn, D, stride3);
        StridedMatrixMap<T> dv(dqkv.data<T>() + offset + 2 * C, Tn, D, stride3);
        ConstMatrixMap<T> p(probs.data<T>() + (b * n_head + h) * Tn * Tn, Tn, Tn);
        ConstStridedMatrixMap<T> d_o(dout.data<T>() + b * Tn * C + h * D, Tn, D, Eigen::OuterStride<>(C));
        dv.noalias() = p.transpose() * d_o;
        RowMatrix<T> dp = d_o * v.transpose();
        // Softmax backward row by row: dS = P * (dP - rowsum(dP * P)); masked entries have P = 0.
        for (int64_t i = 0; i < Tn; ++i) {
          const T dot = (dp.row(i).array() * p.row(i).array()).sum();
          dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot)).matrix();
        }
        dp *= scale;
        dq.noalias() = dp * k;
        dk.noalias() = dp.transpose() * q;
      }
    }
    Eigen::setNbThreads(0);
  });
  slot.finish();
}

}  // namespace retort::kernels::cpu
