// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The sampler's shard passes on the GPU. A row of up to 256k tokens is split over many blocks (kColumnsPerBlock
// each) so that a handful of rows still fills the device; blocks combine through 64-bit integer atomics (a max
// of packed candidates, sums of fixed-point masses), which are order-independent: the result is the same integers
// as the CPU pass, run after run. The per-row parameters travel to the device in one small copy.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "parallel/generate/sampler_kernels.h"
#include "parallel/generate/sampling_math.h"

namespace retort::generate::kernels::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;
namespace sm = ::retort::generate::sampling;

constexpr int kThreads = 256;
constexpr int64_t kColumnsPerBlock = 4096;

using RowParams = SamplerRowParams;

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(v), o);
    v = other > v ? other : v;
  }
  return v;
}

__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(v), o);
  return v;
}

// f(j, value) for the columns [begin, end) of one block's share of a row x. Rows of float32 or bf16 whose columns come
// in 16-byte packs (x 16-byte aligned, begin and end multiples of 8) are read a pack at a time, a thread's packs all
// loaded before the first is used: one round trip a block instead of one a column (the argmax of a batch-32 decode
// step read its 3 MB of logits in 7.8 us that way). The sampler's results are order-independent maxima and sums.
template <typename T, typename F>
__device__ __forceinline__ void for_block_columns(const T* x, int64_t begin, int64_t end, F&& f) {
  constexpr int kPacks = kColumnsPerBlock / (8 * kThreads);  // a thread's packs
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>) {
    if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && begin % 8 == 0 && end % 8 == 0) {
      float v[kPacks][8];
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t j = begin + 8 * (threadIdx.x + static_cast<int64_t>(k) * kThreads);
        if (j < end) load8(x + j, v[k]);
      }
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t j = begin + 8 * (threadIdx.x + static_cast<int64_t>(k) * kThreads);
        if (j < end)
#pragma unroll
          for (int e = 0; e < 8; ++e) f(j + e, v[k][e]);
      }
      return;
    }
  }
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) f(j, to_f32(x[j]));
}

template <typename T>
__global__ void best_gumbel_kernel(const T* logits, int64_t cols, int64_t blocks_per_row, int64_t index_base,
                                   double temperature, uint64_t seed, const RowParams* params,
                                   unsigned long long* best) {
  const int64_t row = blockIdx.x / blocks_per_row;
  const int64_t begin = (blockIdx.x % blocks_per_row) * kColumnsPerBlock;
  const int64_t end = min(cols, begin + kColumnsPerBlock);
  const RowParams p = params[row];
  uint64_t mine = 0;
  for_block_columns(logits + row * cols, begin, end, [&](int64_t j, float v) {
    if (sm::order_key(v) < p.key_floor) return;
    const int64_t id = index_base + j;
    const uint64_t candidate =
        sm::pack_candidate(sm::score_key(v, temperature, sm::gumbel_noise(seed, p.row_key, id)), id);
    mine = candidate > mine ? candidate : mine;
  });
  mine = warp_max_u64(mine);
  if (threadIdx.x % 32 == 0 && mine != 0) atomicMax(best + row, static_cast<unsigned long long>(mine));
}

template <typename T>
__global__ void argmax_kernel(const T* logits, int64_t cols, int64_t blocks_per_row, int64_t index_base,
                              unsigned long long* best) {
  const int64_t row = blockIdx.x / blocks_per_row;
  const int64_t begin = (blockIdx.x % blocks_per_row) * kColumnsPerBlock;
  const int64_t end = min(cols, begin + kColumnsPerBlock);
  uint64_t mine = 0;
  for_block_columns(logits + row * cols, begin, end, [&](int64_t j, float v) {
    const uint64_t candidate = sm::pack_candidate(sm::order_key(v), index_base + j);
    mine = candidate > mine ? candidate : mine;
  });
  mine = warp_max_u64(mine);
  if (threadIdx.x % 32 == 0 && mine != 0) atomicMax(best + row, static_cast<unsigned long long>(mine));
}

template <typename T>
__global__ void nucleus_histogram_kernel(const T* logits, int64_t cols, int64_t blocks_per_row, double temperature,
                                         uint32_t mask, int shift, const RowParams* params, unsigned long long* bins) {
  const int64_t row = blockIdx.x / blocks_per_row;
  const int64_t begin = (blockIdx.x % blocks_per_row) * kColumnsPerBlock;
  const int64_t end = min(cols, begin + kColumnsPerBlock);
  const RowParams p = params[row];
  const T* x = logits + row * cols;
  // Per-thread bins in registers (the unrolled selects keep them out of local memory), no shared atomics.
  uint64_t acc[sm::kBins];
#pragma unroll
  for (int b = 0; b < sm::kBins; ++b) acc[b] = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const float v = to_f32(x[j]);
    const uint32_t key = sm::order_key(v);
    if ((key & mask) != p.key_floor) continue;
    const uint32_t digit = (key >> shift) & (sm::kBins - 1);
    const uint64_t mass = sm::quantized_mass(v, p.row_max, temperature);
#pragma unroll
    for (int b = 0; b < sm::kBins; ++b) acc[b] += digit == static_cast<uint32_t>(b) ? mass : 0;
  }
#pragma unroll
  for (int b = 0; b < sm::kBins; ++b) {
    const uint64_t total = warp_sum_u64(acc[b]);
    if (threadIdx.x % 32 == 0 && total != 0)
      atomicAdd(bins + row * sm::kBins + b, static_cast<unsigned long long>(total));
  }
}

// Runs `launch(params, out, blocks_per_row)` with the per-row parameters on the device and `out_per_row` zeroed
// 64-bit outputs per row, and returns the outputs on the host.
template <typename T>
void launch_best_gumbel(const Tensor& logits, int64_t blocks_per_row, unsigned grid, int64_t index_base,
                        double temperature, uint64_t seed, const RowParams* params, unsigned long long* best,
                        cudaStream_t stream) {
  best_gumbel_kernel<T><<<grid, kThreads, 0, stream>>>(logits.data<T>(), logits.size(1), blocks_per_row, index_base,
                                                       temperature, seed, params, best);
}

int64_t blocks_per_row_of(const Tensor& logits) {
  const int64_t rows = logits.size(0), cols = logits.size(1);
  const int64_t blocks_per_row = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  check(rows * blocks_per_row <= INT32_MAX, "sampler (CUDA): {} rows of {} columns need too many blocks", rows, cols);
  return blocks_per_row;
}

template <typename Launch>
std::vector<uint64_t> run_rows(const Tensor& logits, const std::vector<RowParams>& host_params, int out_per_row,
                               Launch&& launch) {
  rc::DeviceGuard guard(device_of(logits, "sampler"));
  const int64_t rows = logits.size(0), cols = logits.size(1);
  std::vector<uint64_t> out(static_cast<size_t>(rows * out_per_row), 0);
  if (rows == 0) return out;
  const cudaStream_t stream = rc::current_stream();
  rc::ScratchBuffer params(host_params.size() * sizeof(RowParams));
  rc::ScratchBuffer device_out(out.size() * sizeof(uint64_t));
  RETORT_CUDA_CHECK(cudaMemcpyAsync(params.data(), host_params.data(), host_params.size() * sizeof(RowParams),
                                    cudaMemcpyHostToDevice, stream));
  RETORT_CUDA_CHECK(cudaMemsetAsync(device_out.data(), 0, out.size() * sizeof(uint64_t), stream));
  const int64_t blocks_per_row = blocks_per_row_of(logits);
  launch(static_cast<const RowParams*>(params.data()), static_cast<unsigned long long*>(device_out.data()),
         blocks_per_row, static_cast<unsigned>(rows * blocks_per_row), stream);
  RETORT_CUDA_CHECK_LAUNCH();
  RETORT_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), device_out.data(), out.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
  RETORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

__global__ void word_copy_kernel(const uint32_t* src, uint32_t* dst, int64_t words) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src != nullptr ? src[i] : 0u;
}

void zero_rows(uint64_t* best, int64_t rows, cudaStream_t stream) {
  if (copies_as_kernels())
    enqueue_word_copy(nullptr, reinterpret_cast<uint32_t*>(best), 2 * rows);
  else
    RETORT_CUDA_CHECK(cudaMemsetAsync(best, 0, static_cast<size_t>(rows) * sizeof(uint64_t), stream));
}

}  // namespace

bool copies_as_kernels() {
  static const bool kernels = [] {
    const char* v = std::getenv("RETORT_DECODE_GRAPH_COPIES");
    return v == nullptr || std::strcmp(v, "nodes") != 0;
  }();
  return kernels;
}

void enqueue_word_copy(const uint32_t* src, uint32_t* dst, int64_t words) {
  if (words <= 0) return;
  constexpr int kCopyThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((words + kCopyThreads - 1) / kCopyThreads, 64));
  word_copy_kernel<<<blocks, kCopyThreads, 0, rc::current_stream()>>>(src, dst, words);
  RETORT_CUDA_CHECK_LAUNCH();
}

std::vector<uint64_t> best_gumbel_candidates(const Tensor& logits, int64_t index_base, double temperature,
                                             uint64_t seed, const std::vector<uint64_t>& row_keys,
                                             const std::vector<uint32_t>& min_keys) {
  std::vector<RowParams> params(row_keys.size());
  for (size_t r = 0; r < params.size(); ++r) params[r] = RowParams{row_keys[r], min_keys[r], 0.f};
  return run_rows(
      logits, params, 1,
      [&](const RowParams* p, unsigned long long* out, int64_t blocks_per_row, unsigned grid, cudaStream_t stream) {
        dispatch_float(logits.dtype(), "sampler", [&](auto tag) {
          using T = typename decltype(tag)::type;
          launch_best_gumbel<T>(logits, blocks_per_row, grid, index_base, temperature, seed, p, out, stream);
        });
      });
}

std::vector<uint64_t> nucleus_histogram(const Tensor& logits, double temperature, const std::vector<float>& row_max,
                                        const std::vector<uint32_t>& prefixes, uint32_t mask, int shift) {
  std::vector<RowParams> params(prefixes.size());
  for (size_t r = 0; r < params.size(); ++r) params[r] = RowParams{0, prefixes[r], row_max[r]};
  return run_rows(
      logits, params, sm::kBins,
      [&](const RowParams* p, unsigned long long* out, int64_t blocks_per_row, unsigned grid, cudaStream_t stream) {
        dispatch_float(logits.dtype(), "sampler", [&](auto tag) {
          using T = typename decltype(tag)::type;
          nucleus_histogram_kernel<T><<<grid, kThreads, 0, stream>>>(logits.data<T>(), logits.size(1), blocks_per_row,
                                                                     temperature, mask, shift, p, out);
        });
      });
}

void enqueue_best_gumbel(const Tensor& logits, int64_t index_base, double temperature, uint64_t seed,
                         const SamplerRowParams* params, uint64_t* best, bool best_zeroed) {
  rc::DeviceGuard guard(device_of(logits, "sampler"));
  const int64_t rows = logits.size(0);
  if (rows == 0) return;
  const cudaStream_t stream = rc::current_stream();
  if (!best_zeroed) zero_rows(best, rows, stream);
  const int64_t blocks_per_row = blocks_per_row_of(logits);
  dispatch_float(logits.dtype(), "sampler", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_best_gumbel<T>(logits, blocks_per_row, static_cast<unsigned>(rows * blocks_per_row), index_base, temperature,
                          seed, params, reinterpret_cast<unsigned long long*>(best), stream);
  });
  RETORT_CUDA_CHECK_LAUNCH();
}

void enqueue_argmax(const Tensor& logits, int64_t index_base, uint64_t* best, bool best_zeroed) {
  rc::DeviceGuard guard(device_of(logits, "sampler"));
  const int64_t rows = logits.size(0);
  if (rows == 0) return;
  const cudaStream_t stream = rc::current_stream();
  if (!best_zeroed) zero_rows(best, rows, stream);
  const int64_t blocks_per_row = blocks_per_row_of(logits);
  dispatch_float(logits.dtype(), "sampler", [&](auto tag) {
    using T = typename decltype(tag)::type;
    argmax_kernel<T><<<static_cast<unsigned>(rows * blocks_per_row), kThreads, 0, stream>>>(
        logits.data<T>(), logits.size(1), blocks_per_row, index_base, reinterpret_cast<unsigned long long*>(best));
  });
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::generate::kernels::cuda
