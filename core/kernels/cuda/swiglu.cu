// SwiGLU, silu(gate) * up, one pass over the elements each way: 8-element packs (16-byte accesses) when every
// pointer is 16-byte aligned, a scalar loop for the rest; float32 math whatever the storage dtype. expf, not the
// fast approximation, keeps f32 results within a few ulp of the CPU's.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float g) {
  return 1.f / (1.f + expf(-g));  // expf(-g) = inf for g below -88: 0, as it should be
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, T* out, int64_t n, bool vec) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    const int64_t packs = n / 8;
    for (int64_t p = tid; p < packs; p += stride) {
      float g[8], u[8];
      load8(gate + 8 * p, g);
      load8(up + 8 * p, u);
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] = g[i] * sigmoid(g[i]) * u[i];
      store8(out + 8 * p, g);
    }
    start = packs * 8;
  }
  for (int64_t i = start + tid; i < n; i += stride) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<T>(g * sigmoid(g) * to_f32(up[i]));
  }
}

// d/dgate = dout up s (1 + g (1 - s)), d/dup = dout g s, with s = sigmoid(g).
template <typename T>
__global__ void swiglu_backward_kernel(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t n,
                                       bool vec) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    const int64_t packs = n / 8;
    for (int64_t p = tid; p < packs; p += stride) {
      float g[8], u[8], d[8];
      load8(gate + 8 * p, g);
      load8(up + 8 * p, u);
      load8(dout + 8 * p, d);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float s = sigmoid(g[i]);
        const float dg = d[i] * u[i] * s * (1.f + g[i] * (1.f - s));
        u[i] = d[i] * g[i] * s;
        g[i] = dg;
      }
      store8(dgate + 8 * p, g);
      store8(dup + 8 * p, u);
    }
    start = packs * 8;
  }
  for (int64_t i = start + tid; i < n; i += stride) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dout[i]), s = sigmoid(g);
    dgate[i] = from_f32<T>(d * u * s * (1.f + g * (1.f - s)));
    dup[i] = from_f32<T>(d * g * s);
  }
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "swiglu_forward"));
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype(), "swiglu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = aligned16(gate.raw_data()) && aligned16(up.raw_data()) && aligned16(out.raw_data());
    swiglu_forward_kernel<T><<<grid_for((vec ? n / 8 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(
        gate.data<T>(), up.data<T>(), out.data<T>(), n, vec);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  rc::DeviceGuard guard(device_of(gate, "swiglu_backward"));
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype(), "swiglu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = aligned16(gate.raw_data()) && aligned16(up.raw_data()) && aligned16(dout.raw_data()) &&
                     aligned16(dgate.raw_data()) && aligned16(dup.raw_data());
    swiglu_backward_kernel<T><<<grid_for((vec ? n / 8 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(
        gate.data<T>(), up.data<T>(), dout.data<T>(), dgate.data<T>(), dup.data<T>(), n, vec);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace retort::kernels::cuda
