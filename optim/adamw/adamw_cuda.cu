// AdamW on the GPU as one launch over every tensor of the model: the launch carries a table of (param, grad, m, v,
// bf16 working copy, numel, weight decay) entries, and each block updates one fixed-size chunk of one tensor. One
// pass reads p, g, m, v and writes p, m, v and the bf16 copy. A per-tensor launch costs ~150 launches per step
// for GPT-2 small, most of them on tensors too small to fill the GPU.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda/cuda_context.h"
#include "optim/adamw/adamw.h"
#include "optim/multi_tensor_chunks.cuh"

namespace retort::optim {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 8;  // elements per block: 8 per thread, enough work to hide the launch of a block

// Kernel parameters may take up to 32,764 bytes (CUDA 12.1+, Volta and newer): 400 entries of 56 bytes plus
// their chunk offsets fit, so a model of up to 400 parameter tensors is one launch (larger ones take several).
constexpr int kTableCapacity = 400;

struct AdamWTable {
  AdamWTensor tensors[kTableCapacity];
  int64_t first_chunk[kTableCapacity];  // the chunk index where each tensor starts (a prefix sum)
  int count;
};
static_assert(sizeof(AdamWTable) + sizeof(AdamWStep) <= 32764, "the AdamW table must fit the kernel parameters");

// __grid_constant__: the table stays in the parameter bank and is indexed there, never copied per thread.
// kFromMemory (a step replayed by a CUDA graph): lr, the bias corrections and the gradient factor are read from
// device memory. A template argument, so the plain update is the same code as before.
template <bool kFromMemory>
__global__ void adamw_multi_tensor_kernel(const __grid_constant__ AdamWTable table, const AdamWStep step,
                                          const AdamWDeviceScalars* __restrict__ from_memory) {
  float lr = step.lr, bias_correction1 = step.bias_correction1, bias_correction2 = step.bias_correction2,
        grad_factor = 1.0f;
  if constexpr (kFromMemory) {
    lr = from_memory->lr;
    bias_correction1 = from_memory->bias_correction1;
    bias_correction2 = from_memory->bias_correction2;
    grad_factor = from_memory->grad_factor;
  }
  const AdamWStep& s = step;
  const int64_t chunk = blockIdx.x;
  const int lo = tensor_of_chunk(table.first_chunk, table.count, chunk);
  const AdamWTensor& t = table.tensors[lo];
  const int64_t begin = (chunk - table.first_chunk[lo]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  float* __restrict__ p = t.param;
  const float* __restrict__ g = t.grad;
  float* __restrict__ m = t.exp_avg;
  float* __restrict__ v = t.exp_avg_sq;
  __nv_bfloat16* __restrict__ copy = reinterpret_cast<__nv_bfloat16*>(t.bf16_copy);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    // The CPU update's arithmetic in the same order (optim/adamw/adamw.cpp), so both agree to rounding.
    const float gi = kFromMemory ? g[i] * grad_factor : g[i];
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bias_correction1;
    const float v_hat = vi / bias_correction2;
    const float pi = p[i] - lr * (t.weight_decay * p[i] + m_hat / (sqrtf(v_hat) + s.eps));
    p[i] = pi;
    if (copy) copy[i] = __float2bfloat16_rn(pi);
  }
}

}  // namespace

void adamw_update_many_cuda(const std::vector<AdamWTensor>& tensors, const AdamWStep& s, Device device,
                            const AdamWDeviceScalars* device_scalars) {
  RETORT_CUDA_CHECK(cudaSetDevice(device.index));
  AdamWTable table;
  size_t next = 0;
  while (next < tensors.size()) {
    table.count = 0;
    int64_t chunks = 0;
    for (; next < tensors.size() && table.count < kTableCapacity; ++next) {
      if (tensors[next].numel == 0) continue;
      table.tensors[table.count] = tensors[next];
      table.first_chunk[table.count] = chunks;
      chunks += (tensors[next].numel + kChunk - 1) / kChunk;
      ++table.count;
    }
    if (table.count == 0) continue;
    RETORT_CHECK(chunks <= 0x7fffffff, "AdamW: {} chunks exceed one launch's grid", chunks);
    const unsigned grid = static_cast<unsigned>(chunks);
    if (device_scalars)
      adamw_multi_tensor_kernel<true><<<grid, kThreads, 0, cuda::current_stream()>>>(table, s, device_scalars);
    else
      adamw_multi_tensor_kernel<false><<<grid, kThreads, 0, cuda::current_stream()>>>(table, s, nullptr);
    RETORT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace retort::optim
