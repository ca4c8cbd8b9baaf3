// Rotary position embedding (Hugging Face's rotate-half layout) and its inverse, the gradient: one thread per
// pair (j, j + head_dim / 2) of one head of one position. The angle is the float32 product of the position and
// the inverse frequency, as the reference computes it; sincosf (full range reduction, not the fast intrinsic)
// keeps large positions exact to float32.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

template <typename T>
__global__ void rotary_kernel(const T* x, const int32_t* positions, const float* inv_freq, T* out, int64_t rows,
                              int64_t heads, int64_t half, float sign) {
  const int64_t n = rows * heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half, rh = i / half, row = rh / heads;
    const float angle = static_cast<float>(positions[row]) * inv_freq[j];
    float s, c;
    sincosf(angle, &s, &c);
    s *= sign;
    const int64_t at = rh * 2 * half + j;  // row * width + head * head_dim + j
    const float a = to_f32(x[at]), b = to_f32(x[at + half]);
    out[at] = from_f32<T>(a * c - b * s);
    out[at + half] = from_f32<T>(b * c + a * s);
  }
}

}  // namespace

void rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim, bool inverse,
                      Tensor& out) {
  rc::DeviceGuard guard(device_of(x, "rotary_embedding"));
  const int64_t rows = x.size(0) * x.size(1), heads = x.size(2) / head_dim, half = head_dim / 2;
  if (rows * heads * half == 0) return;
  dispatch_float(x.dtype(), "rotary_embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int threads = 256;
    rotary_kernel<T><<<grid_for(rows * heads * half, threads), threads, 0, rc::current_stream()>>>(
        x.data<T>(), positions.data<int32_t>(), inv_freq.data<float>(), out.data<T>(), rows, heads, half,
        inverse ? -1.f : 1.f);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace retort::kernels::cuda
