// The global gradient norm on the GPU in two launches and no host read: each block squares and sums one chunk of
// one gradient into its own slot (a table of gradients, as the multi-tensor AdamW), then one block adds the slots
// in a fixed order in f64, so the norm is the same on every run (no atomics), and writes the clip factor beside it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_context.h"
#include "core/util/error.h"
#include "optim/grad_norm_on_device.h"
#include "optim/multi_tensor_chunks.cuh"

namespace retort::optim {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 8;
constexpr int kTableCapacity = 1000;  // 24 bytes an entry: well inside the 32 KB of kernel parameters

struct NormTable {
  const float* grads[kTableCapacity];
  int64_t numel[kTableCapacity];
  int64_t first_chunk[kTableCapacity];
  int count;
};

__device__ float block_sum(float value, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void chunk_squares_kernel(const __grid_constant__ NormTable table, float* __restrict__ partials) {
  __shared__ float shared[kThreads / 32];
  const int64_t chunk = blockIdx.x;
  const int lo = tensor_of_chunk(table.first_chunk, table.count, chunk);
  const float* __restrict__ g = table.grads[lo];
  const int64_t begin = (chunk - table.first_chunk[lo]) * kChunk;
  const int64_t end = begin + kChunk < table.numel[lo] ? begin + kChunk : table.numel[lo];
  float sum = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) sum += g[i] * g[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[chunk] = sum;
}

__global__ void finish_norm_kernel(const float* __restrict__ partials, int64_t chunks, double max_norm,
                                   float* __restrict__ norm_out, float* __restrict__ factor_out) {
  constexpr int kFinishThreads = 1024;
  __shared__ double shared[kFinishThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < chunks; i += kFinishThreads) sum += partials[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kFinishThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double norm = sqrt(shared[0]);
    *norm_out = static_cast<float>(norm);
    *factor_out =
        max_norm > 0 && isfinite(norm) && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
  }
}

}  // namespace

void grad_norm_and_clip_factor_cuda(const std::vector<Tensor>& grads, double max_norm, float* norm_out,
                                    float* factor_out, Device device) {
  cuda::DeviceGuard guard(device);
  int64_t total_chunks = 0;
  for (const Tensor& g : grads) total_chunks += (g.numel() + kChunk - 1) / kChunk;
  // One slot per chunk (at least one, so an empty list still yields a norm of 0).
  Tensor partials = Tensor::zeros({std::max<int64_t>(total_chunks, 1)}, DType::F32, device);
  NormTable table;
  int64_t chunk_base = 0;
  size_t next = 0;
  while (next < grads.size()) {
    table.count = 0;
    int64_t chunks = 0;
    for (; next < grads.size() && table.count < kTableCapacity; ++next) {
      const int64_t n = grads[next].numel();
      if (n == 0) continue;
      table.grads[table.count] = grads[next].data<float>();
      table.numel[table.count] = n;
      table.first_chunk[table.count] = chunks;
      chunks += (n + kChunk - 1) / kChunk;
      ++table.count;
    }
    if (table.count == 0) continue;
    RETORT_CHECK(chunks <= 0x7fffffff, "grad_norm_and_clip_factor: {} chunks exceed one launch's grid", chunks);
    chunk_squares_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, cuda::current_stream()>>>(
        table, partials.data<float>() + chunk_base);
    RETORT_CUDA_CHECK_LAUNCH();
    chunk_base += chunks;
  }
  finish_norm_kernel<<<1, 1024, 0, cuda::current_stream()>>>(partials.data<float>(), chunk_base, max_norm, norm_out,
                                                             factor_out);
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::optim
