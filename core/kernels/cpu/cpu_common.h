#pragma once
// Shared helpers of the CPU kernels. The kernels are templates over float and double; bf16 tensors are
// widened to float32 copies first and the results rounded back, since the CPU path is the reference.
#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace retort::kernels::cpu {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
template <typename T>
using StridedMatrixMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstStridedMatrixMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

// A float32 copy of a bf16 tensor; other tensors pass through unchanged.
inline Tensor widen(const Tensor& t) {
  return t.defined() && t.dtype() == DType::BF16 ? t.to(DType::F32) : t;
}

// An output slot: writes go to a float32 buffer when the destination is bf16, and finish() rounds them
// back. `keep_contents` copies the current values in first, for kernels that accumulate.
class OutputSlot {
 public:
  explicit OutputSlot(Tensor& target, bool keep_contents = false) : target_(target) {
    if (target.defined() && target.dtype() == DType::BF16) {
      work_ = keep_contents ? target.to(DType::F32) : Tensor::empty(target.shape(), DType::F32, target.device());
    } else {
      work_ = target;
    }
  }
  Tensor& get() { return work_; }
  void finish() {
    if (target_.defined() && target_.dtype() == DType::BF16) target_.copy_(work_.to(DType::BF16));
  }

 private:
  Tensor& target_;
  Tensor work_;
};

// Calls fn.template operator()<T>() with T = float or double to match the (widened) dtype.
template <typename Fn>
void dispatch_real(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
    case DType::BF16:
      fn.template operator()<float>();
      return;
    case DType::F64:
      fn.template operator()<double>();
      return;
    case DType::I32:
      break;
  }
  throw Error(fmt::format("kernel needs a floating-point tensor, got {}", dtype_name(dtype)));
}

// Rows and columns of a tensor viewed as [rows, last dim].
inline int64_t last_dim(const Tensor& t) {
  return t.ndim() == 0 ? 1 : t.size(-1);
}
inline int64_t leading_rows(const Tensor& t) {
  return last_dim(t) == 0 ? 0 : t.numel() / last_dim(t);
}

// Per-row statistics (mean, rstd, lse) are f32, or f64 when the kernel runs in f64 for reference checks.
inline void store_stat(const Tensor& stat, int64_t i, double value) {
  if (stat.dtype() == DType::F64) {
    stat.data<double>()[i] = value;
  } else {
    stat.data<float>()[i] = static_cast<float>(value);
  }
}
inline double load_stat(const Tensor& stat, int64_t i) {
  return stat.dtype() == DType::F64 ? stat.data<double>()[i] : stat.data<float>()[i];
}

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

}  // namespace retort::kernels::cpu
