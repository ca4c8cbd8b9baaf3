// A LayerNorm's weight and bias folded into the product after it (fold_norm_into_linear, decode_kernels.h): one block
// per output row n writes W'[n, :] = W[n, :] * gamma rounded to the weight's dtype and the row's two sums, the sum of
// W' as stored and bias[n] + W[n, :] . beta, in float32. It runs once per weight, so it is written for clarity.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;

template <typename T, typename TN>
__global__ void fold_norm_kernel(const TN* gamma, const TN* beta, const T* w, const T* bias, int64_t K, T* folded,
                                 float* colsum, float* shift) {
  __shared__ float scratch[64];
  const int64_t n = blockIdx.x;
  const T* row = w + n * K;
  T* out = folded + n * K;
  float2 sums = make_float2(0.f, 0.f);
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float v = to_f32(row[k]);
    const T scaled = from_f32<T>(v * to_f32(gamma[k]));
    out[k] = scaled;
    sums.x += to_f32(scaled);
    if (beta != nullptr) sums.y += v * to_f32(beta[k]);
  }
  sums = block_sum2(sums, scratch);
  if (threadIdx.x == 0) {
    colsum[n] = sums.x;
    shift[n] = sums.y + (bias != nullptr ? to_f32(bias[n]) : 0.f);
  }
}

}  // namespace

void fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight, const Tensor& bias,
                           NormedLinear& out) {
  rc::DeviceGuard guard(device_of(weight, "fold_norm_into_linear"));
  const int64_t N = weight.size(0), K = weight.size(1);
  if (N == 0) return;
  dispatch_float(weight.dtype(), "fold_norm_into_linear", [&](auto wt) {
    using T = typename decltype(wt)::type;
    dispatch_float(norm_weight.dtype(), "fold_norm_into_linear", [&](auto nt) {
      using TN = typename decltype(nt)::type;
      fold_norm_kernel<T, TN><<<static_cast<unsigned>(N), kThreads, 0, rc::current_stream()>>>(
          norm_weight.data<TN>(), norm_bias.defined() ? norm_bias.data<TN>() : nullptr, weight.data<T>(),
          bias.defined() ? bias.data<T>() : nullptr, K, out.weight.data<T>(), out.colsum.data<float>(),
          out.shift.data<float>());
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace retort::kernels::cuda
