// REKLS's elementwise kernels on the GPU (optim/rekls_kernels.h states the math). The same float operations in
// the same order as the CPU loops, so the two paths differ only by the GEMMs and eigh around them.
#include "core/cuda/cuda_context.h"
#include "optim/rekls/rekls_kernels.h"

namespace retort::optim {

namespace {

int blocks_for(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + 255) / 256, 65535));
}

__global__ void scale_columns_kernel(const float* __restrict__ q, const float* __restrict__ lam,
                                     float* __restrict__ out, int64_t k, float dim, float eps) {
  const int64_t total = k * k;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float inverse = 1.0f / (dim * fmaxf(lam[idx % k], eps));
    out[idx] = q[idx] * inverse;
  }
}

__global__ void rotated_adam_kernel(const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v, float* u,
                                    int64_t n, RotatedAdamStep s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    u[i] = (mi / s.bias_correction1) / (sqrtf(vi / s.bias_correction2) + s.eps);
  }
}

}  // namespace

void scale_eigenvector_columns_cuda(const Tensor& q, const Tensor& lam, float dim, float eps, Tensor& out) {
  const int64_t k = lam.numel();
  if (k == 0) return;
  cuda::DeviceGuard guard(q.device());
  scale_columns_kernel<<<blocks_for(k * k), 256, 0, cuda::current_stream()>>>(q.data<float>(), lam.data<float>(),
                                                                              out.data<float>(), k, dim, eps);
  RETORT_CUDA_CHECK_LAUNCH();
}

void rotated_adam_update_cuda(const Tensor& g, Tensor& m, Tensor& v, Tensor& u, const RotatedAdamStep& s) {
  const int64_t n = g.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(g.device());
  rotated_adam_kernel<<<blocks_for(n), 256, 0, cuda::current_stream()>>>(g.data<float>(), m.data<float>(),
                                                                         v.data<float>(), u.data<float>(), n, s);
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::optim
