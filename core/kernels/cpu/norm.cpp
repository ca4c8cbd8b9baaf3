#include <omp.h>

#include <cmath>
#include <vector>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void layer_norm_forward(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, float eps, Tensor& y_in,
                        Tensor& mean, Tensor& rstd) {
  Tensor x = widen(x_in), weight = widen(weight_in), bias = widen(bias_in);
  OutputSlot slot(y_in);
  Tensor& y = slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    const T* w = weight.data<T>();
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data<T>() + r * cols;
      T* yr = y.data<T>() + r * cols;
      double mu = 0;
      for (int64_t c = 0; c < cols; ++c) mu += xr[c];
      mu /= cols;
      double var = 0;
      for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      var /= cols;
      const double rs = 1.0 / std::sqrt(var + eps);
      for (int64_t c = 0; c < cols; ++c) yr[c] = T((xr[c] - mu) * rs) * w[c] + (b ? b[c] : T(0));
      store_stat(mean, r, mu);
      store_stat(rstd, r, rs);
    }
  });
  slot.finish();
}

namespace {

// Per-thread partial sums of the weight (and bias) gradients, added together at the end: the row loop
// runs in parallel and the reduction order stays fixed for a given thread count.
template <typename T>
struct ColumnAccumulator {
  ColumnAccumulator(int64_t cols, int parts) : cols(cols), data(static_cast<size_t>(cols) * parts, 0.0) {}
  double* part(int p) { return data.data() + static_cast<size_t>(p) * cols; }
  void add_into(T* out, int parts) {
    for (int64_t c = 0; c < cols; ++c) {
      double total = 0;
      for (int p = 0; p < parts; ++p) total += part(p)[c];
      out[c] += T(total);
    }
  }
  int64_t cols;
  std::vector<double> data;
};

}  // namespace

namespace {

// The norms' backward passes with an optional gradient `dsum_in` already gathered for their input (the residual
// stream of a fused add + norm), added before the one rounding of dx.
void layer_norm_backward_into(const Tensor& dy_in, const Tensor& dsum_in, const Tensor& x_in, const Tensor& weight_in,
                              const Tensor& mean, const Tensor& rstd, Tensor& dx_in, Tensor& dweight_in,
                              Tensor& dbias_in) {
  Tensor dy = widen(dy_in), dsum = widen(dsum_in), x = widen(x_in), weight = widen(weight_in);
  OutputSlot dx_slot(dx_in), dw_slot(dweight_in, true), db_slot(dbias_in, true);
  Tensor &dx = dx_slot.get(), &dweight = dw_slot.get(), &dbias = db_slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    const int parts = omp_get_max_threads();
    ColumnAccumulator<T> dw_acc(cols, parts), db_acc(cols, parts);
    const T* w = weight.data<T>();
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const int p = omp_get_thread_num();
      const T* xr = x.data<T>() + r * cols;
      const T* dyr = dy.data<T>() + r * cols;
      T* dxr = dx.data<T>() + r * cols;
      const T* dsr = dsum.defined() ? dsum.data<T>() + r * cols : nullptr;
      const double mu = load_stat(mean, r), rs = load_stat(rstd, r);
      double mean_g = 0, mean_gx = 0;  // means of dxhat and dxhat * xhat
      for (int64_t c = 0; c < cols; ++c) {
        const double xhat = (xr[c] - mu) * rs;
        const double g = static_cast<double>(dyr[c]) * w[c];
        mean_g += g;
        mean_gx += g * xhat;
        dw_acc.part(p)[c] += static_cast<double>(dyr[c]) * xhat;
        db_acc.part(p)[c] += dyr[c];
      }
      mean_g /= cols;
      mean_gx /= cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double xhat = (xr[c] - mu) * rs;
        dxr[c] = T(rs * (static_cast<double>(dyr[c]) * w[c] - mean_g - xhat * mean_gx) + (dsr ? dsr[c] : T(0)));
      }
    }
    if (dweight.defined()) dw_acc.add_into(dweight.data<T>(), parts);
    if (dbias.defined()) db_acc.add_into(dbias.data<T>(), parts);
  });
  dx_slot.finish();
  dw_slot.finish();
  db_slot.finish();
}

}  // namespace

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  layer_norm_backward_into(dy, Tensor(), x, weight, mean, rstd, dx, dweight, dbias);
}

void add_layer_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                             const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  layer_norm_backward_into(dy, dsum, sum, weight, mean, rstd, dx, dweight, dbias);
}

void rms_norm_forward(const Tensor& x_in, const Tensor& weight_in, float eps, Tensor& y_in, Tensor& rstd) {
  Tensor x = widen(x_in), weight = widen(weight_in);
  OutputSlot slot(y_in);
  Tensor& y = slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    const T* w = weight.data<T>();
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data<T>() + r * cols;
      T* yr = y.data<T>() + r * cols;
      double ms = 0;
      for (int64_t c = 0; c < cols; ++c) ms += static_cast<double>(xr[c]) * xr[c];
      const double rs = 1.0 / std::sqrt(ms / cols + eps);
      for (int64_t c = 0; c < cols; ++c) yr[c] = T(xr[c] * rs) * w[c];
      store_stat(rstd, r, rs);
    }
  });
  slot.finish();
}

namespace {

void rms_norm_backward_into(const Tensor& dy_in, const Tensor& dsum_in, const Tensor& x_in, const Tensor& weight_in,
                            const Tensor& rstd, Tensor& dx_in, Tensor& dweight_in) {
  Tensor dy = widen(dy_in), dsum = widen(dsum_in), x = widen(x_in), weight = widen(weight_in);
  OutputSlot dx_slot(dx_in), dw_slot(dweight_in, true);
  Tensor &dx = dx_slot.get(), &dweight = dw_slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t cols = last_dim(x), rows = leading_rows(x);
    const int parts = omp_get_max_threads();
    ColumnAccumulator<T> dw_acc(cols, parts);
    const T* w = weight.data<T>();
#pragma omp parallel for if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const int p = omp_get_thread_num();
      const T* xr = x.data<T>() + r * cols;
      const T* dyr = dy.data<T>() + r * cols;
      T* dxr = dx.data<T>() + r * cols;
      const T* dsr = dsum.defined() ? dsum.data<T>() + r * cols : nullptr;
      const double rs = load_stat(rstd, r);
      double mean_gx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double xhat = xr[c] * rs;
        mean_gx += static_cast<double>(dyr[c]) * w[c] * xhat;
        dw_acc.part(p)[c] += static_cast<double>(dyr[c]) * xhat;
      }
      mean_gx /= cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double xhat = xr[c] * rs;
        dxr[c] = T(rs * (static_cast<double>(dyr[c]) * w[c] - xhat * mean_gx) + (dsr ? dsr[c] : T(0)));
      }
    }
    if (dweight.defined()) dw_acc.add_into(dweight.data<T>(), parts);
  });
  dx_slot.finish();
  dw_slot.finish();
}

}  // namespace

void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                       Tensor& dweight) {
  rms_norm_backward_into(dy, Tensor(), x, weight, rstd, dx, dweight);
}

void add_rms_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  rms_norm_backward_into(dy, dsum, sum, weight, rstd, dx, dweight);
}

// The CPU is the reference: the fused forward is the add (rounded to the storage dtype, as the stream is
// stored) followed by the norm of the stored sum.
void add_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, float eps,
                            Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  add(x, r, sum, 1.0f, 1.0f);
  layer_norm_forward(sum, weight, bias, eps, y, mean, rstd);
}

void add_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, float eps, Tensor& sum, Tensor& y,
                          Tensor& rstd) {
  add(x, r, sum, 1.0f, 1.0f);
  rms_norm_forward(sum, weight, eps, y, rstd);
}

}  // namespace retort::kernels::cpu
