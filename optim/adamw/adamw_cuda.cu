// AdamW's elementwise update on the GPU: one pass reading p, g, m, v and writing p, m, v.
#include "core/cuda/cuda_context.h"
#include "optim/adamw/adamw.h"

namespace retort::optim {

namespace {
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWStep s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.bias_correction1;
    const float v_hat = vi / s.bias_correction2;
    p[i] -= s.lr * (s.weight_decay * p[i] + m_hat / (sqrtf(v_hat) + s.eps));
  }
}
}  // namespace

void adamw_update_cuda(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s) {
  const int64_t n = param.numel();
  if (n == 0) return;
  RETORT_CUDA_CHECK(cudaSetDevice(param.device().index));
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  adamw_kernel<<<blocks, threads, 0, cuda::current_stream()>>>(param.data<float>(), grad.data<float>(),
                                                               exp_avg.data<float>(), exp_avg_sq.data<float>(), n, s);
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::optim
