#pragma once
// What the two small-m linear kernels share (small_m_linear.cu: CUDA cores, up to 8 rows; small_m_linear_mma.cu:
// tensor cores, up to 32 bf16 rows): the launch parameters, the epilogue of one output, the L2 prefetches issued before
// a dependent launch waits (the per-device facts of a kernel's launch are kernel_facts.cuh's). Included by those two
// files only.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/cuda/kernel_facts.cuh"

namespace retort::kernels::cuda::small_m {
using namespace detail;

enum : int { kNormNone = 0, kNormLayer = 1, kNormRms = 2 };
enum : int { kEpiNone = 0, kEpiGelu = 1, kEpiResidual = 2, kEpiSwiGlu = 3 };

struct Params {
  const void* x;         // [rows, K]
  const void* weight;    // [N, K]
  const void* weight2;   // [N, K] (SwiGLU) or null
  const void* bias;      // [N] or null
  const void* bias2;     // [N] or null
  const void* norm_w;    // [K] or null
  const void* norm_b;    // [K] or null
  const void* residual;  // [rows, N] or null
  void* out;             // [rows, N]
  int64_t rows, K, N;
  int norm;
  bool norm_f32;  // the norm's weight and bias are f32 (else the rows' dtype)
  int epilogue;
  int split;  // warps per output row: 1, 2, 4 or 8
  float eps;
};

__device__ __forceinline__ float silu(float g) {
  return g * (1.f / (1.f + expf(-g)));
}

template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_f32(from_f32<T>(v));
}

// The operands of one output's epilogue, loaded by the lane that finishes it before it has its sums (right after the
// wait for the first tile), so that no load stands between the sums and the store.
struct EpilogueInputs {
  float bias = 0.f, bias2 = 0.f, residual = 0.f;
};

template <typename T>
__device__ __forceinline__ EpilogueInputs load_epilogue(const Params& p, int64_t m, int64_t n) {
  EpilogueInputs e;
  if (p.bias) e.bias = to_f32(static_cast<const T*>(p.bias)[n]);
  if (p.bias2) e.bias2 = to_f32(static_cast<const T*>(p.bias2)[n]);
  if (p.residual) e.residual = to_f32(static_cast<const T*>(p.residual)[m * p.N + n]);
  return e;
}

// The epilogue of output (m, n) from its float32 sums, rounded once into out.
template <typename T>
__device__ __forceinline__ void finish(const Params& p, int64_t m, int64_t n, float v, float v2,
                                       const EpilogueInputs& e) {
  v += e.bias;
  float r = v;
  switch (p.epilogue) {
    case kEpiGelu:
      r = gelu_tanh(v);
      break;
    case kEpiResidual:
      r = rounded<T>(v) + e.residual;
      break;
    case kEpiSwiGlu:
      r = silu(rounded<T>(v)) * rounded<T>(v2 + e.bias2);
      break;
    default:
      break;
  }
  static_cast<T*>(p.out)[m * p.N + n] = from_f32<T>(r);
}

// Moves the weight rows of tile `tile` towards L2 (one bulk request per weight, by one thread).
template <typename T, bool kVec, bool kDual>
__device__ __forceinline__ void prefetch_tile(const Params& p, int64_t tile, int rows_per_tile) {
  if constexpr (kVec) {
    const int64_t first = tile * rows_per_tile;
    const int64_t count = min(static_cast<int64_t>(rows_per_tile), p.N - first);
    const uint32_t bytes = static_cast<uint32_t>(count * p.K * static_cast<int64_t>(sizeof(T)));
    prefetch_l2(static_cast<const T*>(p.weight) + first * p.K, bytes);
    if constexpr (kDual) prefetch_l2(static_cast<const T*>(p.weight2) + first * p.K, bytes);
  }
}

// The norm's parameters towards L2 (they are read by every block).
__device__ __forceinline__ void prefetch_norm(const Params& p, bool vec) {
  if (!vec || p.norm == kNormNone) return;
  const uint32_t bytes = static_cast<uint32_t>(p.K * (p.norm_f32 ? 4 : 2));
  prefetch_l2(p.norm_w, bytes);
  if (p.norm_b) prefetch_l2(p.norm_b, bytes);
}

// The tensor-core kernel (small_m_linear_mma.cu): whether it takes these rows (bf16, 16-byte aligned, K a multiple of
// 32, at least mma_min_rows() and at most kMmaMaxRows rows), and its launch.
constexpr int64_t kMmaMaxRows = 32;
int64_t mma_min_rows();
bool mma_takes(const Params& p, DType dtype, bool vec);
void launch_mma(const Params& p, bool dependent);

}  // namespace retort::kernels::cuda::small_m
