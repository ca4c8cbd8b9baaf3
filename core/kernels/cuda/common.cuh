#pragma once
// Shared device helpers of the CUDA kernels: storage types, float conversion, 16-byte packs, block
// reductions, dtype dispatch and launch sizing. Storage is f32 or bf16; all arithmetic is float32.
// Include this first in every .cu file: see FMT_USE_CONSTEXPR below.

// fmt 9 turns its constexpr support off when it sees __NVCC__, and then its C++20 consteval format-string
// check calls non-constexpr functions, which nvcc's front end and gcc both reject. The host compiler's
// setting (on) compiles under nvcc and keeps .cu and .cpp files agreeing on fmt's inline functions.
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/cuda/cuda_context.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace retort::kernels::cuda::detail {

namespace rc = ::retort::cuda;
using bf16 = __nv_bfloat16;

// ---- conversions ----------------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(bf16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(int32_t v) {
  return static_cast<float>(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  return __float2bfloat16_rn(v);  // round to nearest even, as the host BFloat16
}
template <>
__device__ __forceinline__ int32_t from_f32<int32_t>(float v) {
  return static_cast<int32_t>(v);  // truncation, as the CPU's static_cast
}

// ---- 8-element packs: one 16-byte access for bf16, two for f32 -------------------------------------------
// The pointer must be 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(bf16* p, const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Rows of `cols` elements starting at `base` are all 16-byte aligned and split into whole 8-element packs.
inline bool rows_vectorizable(const void* base, int64_t cols) {
  return aligned16(base) && cols % 8 == 0;
}

// ---- row visits with vector loads in the aligned middle ----------------------------------------------
// Calls f(j, value) for j in [0, n) of one row, spread over the block's threads: scalar loads up to the first
// 16-byte boundary, 8-element packs over the middle, scalar loads for the tail. Works for any n and any
// element offset, so odd widths (a vocabulary of 50257) still get wide loads.
template <typename T>
__device__ __forceinline__ int64_t head_elems(const T* row, int64_t n) {
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) % 16) / sizeof(T);
  const int64_t head = misalign == 0 ? 0 : (16 / static_cast<int64_t>(sizeof(T))) - misalign;
  return head < n ? head : n;
}

// As visit_row, but the aligned middle goes to f8(j0, v) eight values at a time (values j0 .. j0 + 7), so a
// reduction can treat a pack as one step; head and tail go to f1(j, value).
template <typename T, typename F1, typename F8>
__device__ __forceinline__ void visit_row_packs(const T* row, int64_t n, F1&& f1, F8&& f8) {
  const int64_t head = head_elems(row, n);
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f1(j, to_f32(row[j]));
  const int64_t packs = (n - head) / 8;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[8];
    load8(row + head + 8 * p, v);
    f8(head + 8 * p, v);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x) f1(j, to_f32(row[j]));
}

// f(j, row[j]) for every j, the aligned middle loaded in 16-byte packs.
template <typename T, typename F>
__device__ __forceinline__ void visit_row(const T* row, int64_t n, F&& f) {
  visit_row_packs(row, n, f, [&](int64_t j0, const float* v) {
#pragma unroll
    for (int i = 0; i < 8; ++i) f(j0 + i, v[i]);
  });
}

// out[j] = f(j, in[j]) over one row. `vec` only when in and out share their misalignment (same element size
// and the same base address modulo 16, which then holds for every row): the host decides with
// same_misalignment().
template <typename TI, typename TO, typename F>
__device__ __forceinline__ void map_row(const TI* in, TO* out, int64_t n, bool vec, F&& f) {
  if (!vec) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) out[j] = from_f32<TO>(f(j, to_f32(in[j])));
    return;
  }
  const int64_t head = head_elems(in, n);
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) out[j] = from_f32<TO>(f(j, to_f32(in[j])));
  const int64_t packs = (n - head) / 8;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[8];
    load8(in + head + 8 * p, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = f(head + 8 * p + i, v[i]);
    store8(out + head + 8 * p, v);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x) out[j] = from_f32<TO>(f(j, to_f32(in[j])));
}

// Two inputs read together, same `vec` rule as map_row: the aligned middle goes to f8(j0, a, b) eight pairs at a
// time; head and tail (and every element when !vec) go to f1(j, a, b).
template <typename TA, typename TB, typename F1, typename F8>
__device__ __forceinline__ void visit_row2_packs(const TA* a, const TB* b, int64_t n, bool vec, F1&& f1, F8&& f8) {
  const int64_t head = vec ? head_elems(a, n) : n;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f1(j, to_f32(a[j]), to_f32(b[j]));
  if (!vec) return;
  const int64_t packs = (n - head) / 8;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float va[8], vb[8];
    load8(a + head + 8 * p, va);
    load8(b + head + 8 * p, vb);
    f8(head + 8 * p, va, vb);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x) f1(j, to_f32(a[j]), to_f32(b[j]));
}

// f(j, a[j], b[j]) for every j (map_row2 also stores out[j] = f(j, a[j], b[j])).
template <typename TA, typename TB, typename F>
__device__ __forceinline__ void visit_row2(const TA* a, const TB* b, int64_t n, bool vec, F&& f) {
  visit_row2_packs(a, b, n, vec, f, [&](int64_t j0, const float* va, const float* vb) {
#pragma unroll
    for (int i = 0; i < 8; ++i) f(j0 + i, va[i], vb[i]);
  });
}

template <typename TA, typename TB, typename TO, typename F>
__device__ __forceinline__ void map_row2(const TA* a, const TB* b, TO* out, int64_t n, bool vec, F&& f) {
  const int64_t head = vec ? head_elems(a, n) : n;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) out[j] = from_f32<TO>(f(j, to_f32(a[j]), to_f32(b[j])));
  if (!vec) return;
  const int64_t packs = (n - head) / 8;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float va[8], vb[8];
    load8(a + head + 8 * p, va);
    load8(b + head + 8 * p, vb);
#pragma unroll
    for (int i = 0; i < 8; ++i) va[i] = f(head + 8 * p + i, va[i], vb[i]);
    store8(out + head + 8 * p, va);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x)
    out[j] = from_f32<TO>(f(j, to_f32(a[j]), to_f32(b[j])));
}

// True when all the buffers have one element size and one address modulo 16: then every row of theirs
// starts equally far from a 16-byte boundary and one head/pack/tail split serves them all.
template <typename T0, typename... Ts>
bool same_misalignment(const T0* first, const Ts*... rest) {
  const uintptr_t m = reinterpret_cast<uintptr_t>(first) % 16;
  return ((sizeof(Ts) == sizeof(T0) && reinterpret_cast<uintptr_t>(rest) % 16 == m) && ...);
}

// GELU with the tanh approximation (GPT-2's), in float32.
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kA = 0.044715f;
  return 0.5f * x * (1.f + tanhf(kC * (x + kA * x * x * x)));
}

// ---- reductions ---------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum returned to every thread. Every warp reduces the per-warp totals itself (in the same
// order), which saves a broadcast barrier; `scratch` holds 32 values. blockDim.x must be a multiple of 32.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();  // scratch may be reused right away
  return total;
}

__device__ __forceinline__ float2 block_sum2(float2 v, float* scratch /* 64 */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  if (lane == 0) scratch[warp] = v.x, scratch[32 + warp] = v.y;
  __syncthreads();
  float2 total = lane < warps ? make_float2(scratch[lane], scratch[32 + lane]) : make_float2(0.f, 0.f);
  total.x = warp_sum(total.x);
  total.y = warp_sum(total.y);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

// Running (max, sum of exp(x - max)) of a stream of values: one pass over the data for a log-sum-exp.
struct OnlineLse {
  float max = -INFINITY;
  float sum = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) return;  // exp(-inf) adds nothing, and -inf - -inf would be NaN
    if (x > max) {
      sum = sum * expf(max - x) + 1.f;  // at the start max = -inf and sum = 0: 0 * 0
      max = x;
    } else {
      sum += expf(x - max);
    }
  }
  __device__ __forceinline__ void merge(float other_max, float other_sum) {
    if (other_max == -INFINITY) return;
    if (max == -INFINITY) {
      max = other_max;
      sum = other_sum;
      return;
    }
    const float m = fmaxf(max, other_max);
    sum = sum * expf(max - m) + other_sum * expf(other_max - m);
    max = m;
  }
};

__device__ __forceinline__ OnlineLse block_lse(OnlineLse v, float* scratch /* 64 */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m = __shfl_xor_sync(0xffffffffu, v.max, o);
    const float s = __shfl_xor_sync(0xffffffffu, v.sum, o);
    v.merge(m, s);
  }
  if (lane == 0) scratch[warp] = v.max, scratch[32 + warp] = v.sum;
  __syncthreads();
  OnlineLse total;
  if (lane < warps) total.max = scratch[lane], total.sum = scratch[32 + lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m = __shfl_xor_sync(0xffffffffu, total.max, o);
    const float s = __shfl_xor_sync(0xffffffffu, total.sum, o);
    total.merge(m, s);
  }
  __syncthreads();
  return total;
}

// Records an index that was out of range (the first one's value and position) for take_device_error().
__device__ __forceinline__ void report_bad_index(rc::DeviceErrorRecord* record, int value, int64_t position) {
  if (atomicAdd(&record->count, 1) == 0) {
    record->value = value;
    record->position = position;
  }
}

// ---- host side --------------------------------------------------------------------------------------------
// nvcc's front end cannot evaluate fmt 9's consteval format-string check (RETORT_CHECK and fmt::format with a
// literal fail to compile in .cu files), so CUDA sources format their messages at run time through these.
template <typename... Args>
[[noreturn]] void fail(std::string_view format, const Args&... args) {
  throw Error(fmt::vformat(format, fmt::make_format_args(args...)));
}
template <typename... Args>
[[noreturn]] void fail_input(std::string_view format, const Args&... args) {
  throw InputError(fmt::vformat(format, fmt::make_format_args(args...)));
}
template <typename... Args>
void check(bool condition, std::string_view format, const Args&... args) {
  if (!condition) [[unlikely]]
    fail(format, args...);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<float>) or fn(TypeTag<bf16>) for the storage dtype; other dtypes are an error.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(TypeTag<float>{});
      return;
    case DType::BF16:
      fn(TypeTag<bf16>{});
      return;
    default:
      break;
  }
  fail("{} (CUDA): storage dtype {} is not supported on the GPU; use f32 or bf16", op, dtype_name(dtype));
}

// Makes the tensor's device current and checks that it is a GPU tensor.
inline int device_of(const Tensor& t, const char* op) {
  check(t.device().is_cuda(), "{} (CUDA): {} is not on a GPU", op, t.describe());
  return t.device().index;
}

inline int sm_count() {
  return rc::device_properties(rc::current_device()).multiProcessorCount;
}

inline unsigned grid_for(int64_t work_items, int threads, int blocks_per_sm = 8) {
  const int64_t wanted = (work_items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count()) * blocks_per_sm;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

// Threads for a block that walks a row of `cols` elements: about one 8-element pack per thread, whole
// warps, at most `max_threads`.
inline int row_threads(int64_t cols, int max_threads = 1024) {
  const int64_t packs = (cols + 7) / 8;
  const int64_t t = (packs + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(t, 32, max_threads));
}

// Grid for one block per row, rows visited in a grid-stride loop beyond the cap.
inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 1 << 20));
}

// out[j] = beta * out[j] + sum_i x[i, j] for x [rows, cols] (beta == 0: out is not read). Deterministic: a
// fixed split of the rows into chunks, reduced in a fixed order. Implemented in elementwise.cu.
void column_sum(const void* x, DType x_dtype, int64_t rows, int64_t cols, void* out, DType out_dtype, float beta);

// Row-major strided-batched product through cuBLAS with float32 compute (no TF32):
//   c[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i], a[i] = a + i * stride_a, etc.
// a is [m, k] ([k, m] if trans_a) with row stride lda; b is [k, n] ([n, k] if trans_b); c is [m, n].
// a and b share ab_dtype; c is ab_dtype or f32. Implemented in gemm.cu.
void gemm_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                  int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta, void* c, int64_t ldc,
                  int64_t stride_c, int64_t batch, DType ab_dtype, DType c_dtype);

// Elementwise dtype conversion of n elements between device buffers (f32, bf16, i32). In elementwise.cu.
void convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n);

}  // namespace retort::kernels::cuda::detail
