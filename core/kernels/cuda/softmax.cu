// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Softmax over the last dimension, one block per row. The forward pass reads the row once for an online
// (max, sum of exp) pair, then once more to write; a row that is all -inf gives zeros, as on the CPU.
#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

template <typename TI, typename TO>
__global__ void softmax_forward_kernel(const TI* x, TO* y, int64_t rows, int64_t cols, bool vec) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TI* xr = x + r * cols;
    TO* yr = y + r * cols;
    OnlineLse lse;
    visit_row(xr, cols, [&](int64_t, float v) { lse.add(v); });
    lse = block_lse(lse, scratch);
    if (lse.max == -INFINITY) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = from_f32<TO>(0.f);
      continue;
    }
    const float m = lse.max, inv = 1.f / lse.sum;
    map_row(xr, yr, cols, vec, [&](int64_t, float v) { return expf(v - m) * inv; });
  }
}

template <typename TY, typename TD, typename TO>
__global__ void softmax_backward_kernel(const TY* y, const TD* dy, TO* dx, int64_t rows, int64_t cols, bool vec) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TY* yr = y + r * cols;
    const TD* dyr = dy + r * cols;
    float dot = 0.f;
    visit_row2(yr, dyr, cols, vec, [&](int64_t, float a, float b) { dot += a * b; });
    dot = block_sum(dot, scratch);
    map_row2(yr, dyr, dx + r * cols, cols, vec, [&](int64_t, float a, float b) { return a * (b - dot); });
  }
}

std::pair<int64_t, int64_t> rows_cols(const Tensor& t) {
  const int64_t cols = t.ndim() == 0 ? 1 : t.size(-1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y) {
  rc::DeviceGuard guard(device_of(x, "softmax_forward"));
  const auto [rows, cols] = rows_cols(x);
  if (rows == 0) return;
  dispatch_float(x.dtype(), "softmax_forward", [&](auto ti) {
    dispatch_float(y.dtype(), "softmax_forward", [&](auto to) {
      using TI = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      const bool vec = same_misalignment(x.data<TI>(), y.data<TO>());
      softmax_forward_kernel<TI, TO>
          <<<row_grid(rows), row_threads(cols), 0, rc::current_stream()>>>(x.data<TI>(), y.data<TO>(), rows, cols, vec);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  rc::DeviceGuard guard(device_of(y, "softmax_backward"));
  const auto [rows, cols] = rows_cols(y);
  if (rows == 0) return;
  dispatch_float(y.dtype(), "softmax_backward", [&](auto ty) {
    dispatch_float(dy.dtype(), "softmax_backward", [&](auto td) {
      dispatch_float(dx.dtype(), "softmax_backward", [&](auto to) {
        using TY = typename decltype(ty)::type;
        using TD = typename decltype(td)::type;
        using TO = typename decltype(to)::type;
        const bool vec = same_misalignment(y.data<TY>(), dy.data<TD>(), dx.data<TO>());
        softmax_backward_kernel<TY, TD, TO><<<row_grid(rows), row_threads(cols), 0, rc::current_stream()>>>(
            y.data<TY>(), dy.data<TD>(), dx.data<TO>(), rows, cols, vec);
        RETORT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace retort::kernels::cuda
