// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Attention over a key/value cache, the inner loop of generation. Two kernels on the stream: the new positions'
// keys and values are copied into the cache, then one block per (row, head, new query) walks the query's keys.
// Decoding reads each cached key and value once per step, so the kernel is a streaming read: each warp takes
// every 4th key, its lanes split the head dimension (a lane holds D / 32 elements of q and of the running output),
// the dot product is a warp reduction, and a running max and sum (online softmax) let the keys be visited once;
// the four warps' partial results are merged through shared memory at the end. Scores, sums and outputs in f32.
#include <cmath>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim up to 256

template <typename T>
__global__ void append_kernel(const T* qkv, const int32_t* starts, T* k_cache, T* v_cache, int64_t B, int64_t Tn,
                              int64_t C, int64_t H, int64_t D, int64_t cap) {
  const int64_t n = B * Tn * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, bt = i / C, b = bt / Tn, t = bt % Tn;
    const int64_t pos = starts[b] + t;
    if (pos >= cap) continue;  // a finished row's padding past the end of its cache
    const int64_t h = c / D, d = c % D;
    const int64_t slot = ((b * H + h) * cap + pos) * D + d;
    k_cache[slot] = qkv[bt * 3 * C + C + c];
    v_cache[slot] = qkv[bt * 3 * C + 2 * C + c];
  }
}

template <typename T, int kPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    attend_kernel(const T* qkv, const int32_t* starts, const T* k_cache, const T* v_cache, T* out, int64_t Tn,
                  int64_t C, int64_t H, int64_t D, int64_t cap, float scale) {
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_acc[kWarps][kMaxPerLane * 32];
  const int64_t t = blockIdx.x % Tn, bh = blockIdx.x / Tn, h = bh % H, b = bh / H;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t seen = min(static_cast<int64_t>(starts[b]) + t + 1, cap);
  const T* q_row = qkv + (b * Tn + t) * 3 * C + h * D;
  const T* keys = k_cache + bh * cap * D;
  const T* values = v_cache + bh * cap * D;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    q[i] = d < D ? to_f32(q_row[d]) * scale : 0.f;
    acc[i] = 0.f;
  }
  float running_max = -INFINITY, running_sum = 0.f;
  for (int64_t j = warp; j < seen; j += kWarps) {
    const T* key = keys + j * D;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) dot += q[i] * to_f32(key[d]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    // Rescale what was summed so far only when the maximum moves.
    float weight;
    if (dot > running_max) {
      const float rescale = __expf(running_max - dot);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] *= rescale;
      running_sum *= rescale;
      running_max = dot;
      weight = 1.f;
    } else {
      weight = __expf(dot - running_max);
    }
    running_sum += weight;
    const T* value = values + j * D;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) acc[i] += weight * to_f32(value[d]);
    }
  }
  if (lane == 0) warp_max[warp] = running_max, warp_sum[warp] = running_sum;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  // Merge the warps: each thread finishes some output elements.
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_max[w]);
  float total = 0.f, factor[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = warp_max[w] == -INFINITY ? 0.f : __expf(warp_max[w] - m);
    total += warp_sum[w] * factor[w];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  T* out_row = out + (b * Tn + t) * C + h * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0.f;  // lane l held elements l, l + 32, ...: element d sits at index d of its warp's row
    for (int w = 0; w < kWarps; ++w) v += warp_acc[w][d] * factor[w];
    out_row[d] = from_f32<T>(v * inv);
  }
}

}  // namespace

void attention_with_cache(const Tensor& qkv, const Tensor& starts, int n_head, Tensor& k_cache, Tensor& v_cache,
                          Tensor& out) {
  rc::DeviceGuard guard(device_of(qkv, "attention_with_cache"));
  const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3, H = n_head, D = C / n_head;
  const int64_t cap = k_cache.size(2);
  if (D > 32 * kMaxPerLane)
    fail_input("attention_with_cache (CUDA): head dimension {} is above the kernel's {}", D, 32 * kMaxPerLane);
  if (B * Tn == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  dispatch_float(qkv.dtype(), "attention_with_cache", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int threads = 256;
    append_kernel<T><<<grid_for(B * Tn * C, threads), threads, 0, rc::current_stream()>>>(
        qkv.data<T>(), starts.data<int32_t>(), k_cache.data<T>(), v_cache.data<T>(), B, Tn, C, H, D, cap);
    RETORT_CUDA_CHECK_LAUNCH();
    const auto launch = [&](auto per_lane) {
      constexpr int kPerLane = decltype(per_lane)::value;
      attend_kernel<T, kPerLane><<<static_cast<unsigned>(B * H * Tn), kWarps * 32, 0, rc::current_stream()>>>(
          qkv.data<T>(), starts.data<int32_t>(), k_cache.data<T>(), v_cache.data<T>(), out.data<T>(), Tn, C, H, D, cap,
          scale);
    };
    // The per-lane register arrays are sized at compile time: the smallest that holds the head.
    if (D <= 64) {
      launch(std::integral_constant<int, 2>{});
    } else if (D <= 128) {
      launch(std::integral_constant<int, 4>{});
    } else {
      launch(std::integral_constant<int, 8>{});
    }
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace retort::kernels::cuda
