// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Whole-tensor sums: a fixed grid of blocks writes per-block partials, one block adds them in a fixed
// order, so the result is the same on every run. Accumulation is in double: the inputs are read once and
// the cost is memory traffic, and a float total of millions of terms would lose digits the CPU path keeps.
#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

template <bool kSquare>
__device__ __forceinline__ double term(float v) {
  return kSquare ? static_cast<double>(v) * v : static_cast<double>(v);
}

template <typename T, bool kSquare>
__global__ void partial_sums_kernel(const T* x, int64_t n, bool vec, double* partial) {
  __shared__ double scratch[32];
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = 0;
  int64_t start = 0;
  if (vec) {
    const int64_t packs = n / 8;
    for (int64_t p = tid; p < packs; p += stride) {
      float v[8];
      load8(x + 8 * p, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc += term<kSquare>(v[i]);
    }
    start = packs * 8;
  }
  for (int64_t i = start + tid; i < n; i += stride) acc += term<kSquare>(to_f32(x[i]));
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void final_sum_kernel(const double* partial, int n, float* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = static_cast<float>(acc);
}

template <bool kSquare>
void reduce_all(const Tensor& x, Tensor& out, const char* op) {
  rc::DeviceGuard guard(device_of(x, op));
  check(out.dtype() == DType::F32 && out.numel() == 1, "{} (CUDA): the result must be one f32 element, got {}", op,
        out.describe());
  const int64_t n = x.numel();
  const bool vec = aligned16(x.raw_data());
  const int64_t work = vec ? n / 8 + n % 8 : n;
  const int blocks = static_cast<int>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
  rc::ScratchBuffer partial(blocks * sizeof(double));
  auto* p = static_cast<double*>(partial.data());
  cudaStream_t stream = rc::current_stream();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    partial_sums_kernel<T, kSquare><<<blocks, kThreads, 0, stream>>>(x.data<T>(), n, vec, p);
    RETORT_CUDA_CHECK_LAUNCH();
  });
  final_sum_kernel<<<1, kThreads, 0, stream>>>(p, blocks, out.data<float>());
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum(const Tensor& x, Tensor& out) {
  reduce_all<false>(x, out, "sum");
}
void sum_squares(const Tensor& x, Tensor& out) {
  reduce_all<true>(x, out, "sum_squares");
}

}  // namespace retort::kernels::cuda
