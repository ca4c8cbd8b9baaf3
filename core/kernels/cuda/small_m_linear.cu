// The small-m linear of a decode step: out [M, N] = epilogue(norm(x) [M, K] W^T + bias) for M <= 8 rows, one launch,
// on the CUDA cores; bf16 rows from 5 on go to the tensor-core kernel (small_m_linear_mma.cu) when it takes them, and
// more than 8 rows it does not take run here in launches of 8 (small_m_linear() at the end of this file).
//
// With a handful of rows a product is a matrix-vector product bound by reading the weight once; cuBLAS runs it as a
// GEMM tile too wide for the rows and leaves the norm before and the bias or residual after to other launches. Here:
//   - a block of 8 warps owns 8 / split consecutive output rows (a tile), `split` warps to a row, each warp's lanes
//     reading consecutive 16-byte packs of the row (8 bf16 values), so a warp streams 512 contiguous bytes per load
//     and every lane has several loads in flight before it does any arithmetic;
//   - the input rows are normed (LayerNorm or RMSNorm, float32 statistics, rounded to the storage dtype as a norm
//     kernel would store them) inside the kernel; each block recomputes the norm of its few rows, which costs less
//     than a launch;
//   - per (row, input) the lanes' float32 sums are reduced with warp shuffles, then across the row's warps through
//     shared memory in a fixed order (deterministic, no atomics); one lane per output applies the epilogue (bias,
//     GELU, SwiGLU with a second weight, or the residual add), whose operands it loaded before the sums, and rounds
//     once;
//   - the number of warps per row is chosen so that a lane loads at most 4 packs per pass and there are about as
//     many tiles as SMs; blocks walk the tiles in a grid-stride loop (the LM head's 50k rows), prefetching the next
//     tile's weights into L2;
//   - under programmatic dependent launch (dependent_launch.cuh) a block starts while the previous kernel finishes:
//     it prefetches its first tile's weights (and the norm's parameters) into L2 and only then waits for the input.
// Two kernels share this plan:
//   one_row_kernel, one input row (the decode step of one sequence) in one pass over each weight row: a lane's packs
//     sit at the same positions in every output row, so it loads the input values there straight into registers,
//     norms them itself (when a warp owns the whole row, its lanes' packs cover the input, so the statistics are warp
//     reductions) and keeps them for every tile: no shared-memory staging, no block barrier when a warp owns a row;
//   rows_kernel, everything else: the rows, normed or copied, are staged in shared memory by the block, and the
//     lanes' sums for the M rows are folded across the warp in log2(M) halving steps and a final reduction, so that
//     every lane ends with one row's total (9 shuffles for 8 rows instead of 40).
// K not a multiple of 8 (or unaligned rows) takes rows_kernel with one element per load instead of a pack.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include <algorithm>
#include <type_traits>

#include "core/kernels/cuda/small_m_linear_parts.cuh"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;
using namespace small_m;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunks = 4;      // packs a lane loads per pass over a weight row
constexpr int kTilesPerSm = 4;  // the grid: at most this many blocks per SM, the rest of the tiles in a loop

// One pass's weights of a lane: kPack values, kept raw (bf16 or f32) until the arithmetic.
template <typename T, bool kVec>
struct Pack;
template <>
struct Pack<bf16, true> {
  uint4 raw;
  // Weights: read once per step, streamed past the caches; inputs and norm parameters: read by every warp of a block.
  __device__ __forceinline__ void load(const bf16* p) { raw = __ldcs(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ void load_cached(const bf16* p) { raw = *reinterpret_cast<const uint4*>(p); }
  // The values rounded to bf16.
  __device__ __forceinline__ void pack(const float (&v)[8]) {
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  }
  __device__ __forceinline__ void unpack(float (&v)[8]) const {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};
template <>
struct Pack<float, true> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = __ldcs(reinterpret_cast<const float4*>(p));
    b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
  }
  __device__ __forceinline__ void load_cached(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void pack(const float (&v)[8]) {
    a = make_float4(v[0], v[1], v[2], v[3]);
    b = make_float4(v[4], v[5], v[6], v[7]);
  }
  __device__ __forceinline__ void unpack(float (&v)[8]) const {
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
};
template <typename T>
struct Pack<T, false> {
  T raw;
  __device__ __forceinline__ void load(const T* p) { raw = *p; }
  __device__ __forceinline__ void unpack(float (&v)[1]) const { v[0] = to_f32(raw); }
};

// kPack values of a normed row from shared memory (16-byte aligned when kVec).
template <typename T, bool kVec>
__device__ __forceinline__ void load_row_values(const T* p, float (&v)[kVec ? 8 : 1]) {
  if constexpr (kVec)
    load8(p, v);
  else
    v[0] = to_f32(*p);
}

__device__ __forceinline__ float norm_param(const void* p, bool f32, int64_t k, const bf16*) {
  return f32 ? static_cast<const float*>(p)[k] : to_f32(static_cast<const bf16*>(p)[k]);
}
__device__ __forceinline__ float norm_param(const void* p, bool, int64_t k, const float*) {
  return static_cast<const float*>(p)[k];
}

// Normalises one row of K = 8 * packs values into shared memory with one warp, statistics as the norm kernels
// compute them (the mean, then the second moment about it): the first pass copies the row into shared memory (its
// loads unrolled, so several are in flight) and the later passes read it back from there, each lane the packs it
// wrote (no barrier needed).
template <typename T>
__device__ void norm_row_packed(const Params& p, const T* xr, T* hr, int64_t packs, int lane) {
  const float inv_k = 1.f / static_cast<float>(p.K);
  float s = 0.f;
#pragma unroll 4
  for (int64_t q = lane; q < packs; q += 32) {
    float v[8];
    load8(xr + 8 * q, v);
    store8(hr + 8 * q, v);
#pragma unroll
    for (int e = 0; e < 8; ++e) s += v[e];
  }
  const float mu = p.norm == kNormLayer ? warp_sum(s) * inv_k : 0.f;
  float sq = 0.f;
  for (int64_t q = lane; q < packs; q += 32) {
    float v[8];
    load8(hr + 8 * q, v);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += (v[e] - mu) * (v[e] - mu);
  }
  const float rs = 1.f / sqrtf(warp_sum(sq) * inv_k + p.eps);
  for (int64_t q = lane; q < packs; q += 32) {
    float v[8], w[8], b[8] = {};
    load8(hr + 8 * q, v);
    if (p.norm_f32) {
      load8(static_cast<const float*>(p.norm_w) + 8 * q, w);
      if (p.norm_b) load8(static_cast<const float*>(p.norm_b) + 8 * q, b);
    } else {
      load8(static_cast<const T*>(p.norm_w) + 8 * q, w);
      if (p.norm_b) load8(static_cast<const T*>(p.norm_b) + 8 * q, b);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (v[e] - mu) * rs * w[e] + b[e];
    store8(hr + 8 * q, v);
  }
}

template <typename T>
__device__ void norm_row_scalar(const Params& p, const T* xr, T* hr, int lane) {
  const int64_t K = p.K;
  const float inv_k = 1.f / static_cast<float>(K);
  float mu = 0.f;
  if (p.norm == kNormLayer) {
    float s = 0.f;
    for (int64_t k = lane; k < K; k += 32) s += to_f32(xr[k]);
    mu = warp_sum(s) * inv_k;
  }
  float sq = 0.f;
  for (int64_t k = lane; k < K; k += 32) {
    const float d = to_f32(xr[k]) - mu;
    sq += d * d;
  }
  const float rs = 1.f / sqrtf(warp_sum(sq) * inv_k + p.eps);
  const T* tag = nullptr;
  for (int64_t k = lane; k < K; k += 32) {
    const float w = norm_param(p.norm_w, p.norm_f32, k, tag);
    const float b = p.norm_b ? norm_param(p.norm_b, p.norm_f32, k, tag) : 0.f;
    hr[k] = from_f32<T>((to_f32(xr[k]) - mu) * rs * w + b);
  }
}

// The input rows into shared memory: copied by the whole block, or normed by one warp per row (rows w, w + 8, ...:
// whole-warp reductions, no block barrier per row).
template <typename T, bool kVec>
__device__ void stage_rows(const Params& p, T* rows_s) {
  const T* x = static_cast<const T*>(p.x);
  const int64_t K = p.K;
  if (p.norm == kNormNone) {
    if constexpr (kVec) {
      const int64_t packs = p.rows * K / 8;
      for (int64_t q = threadIdx.x; q < packs; q += kThreads) {
        float v[8];
        load8(x + 8 * q, v);
        store8(rows_s + 8 * q, v);
      }
    } else {
      for (int64_t i = threadIdx.x; i < p.rows * K; i += kThreads) rows_s[i] = x[i];
    }
    return;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t m = warp; m < p.rows; m += kWarps) {
    if constexpr (kVec)
      norm_row_packed<T>(p, x + m * K, rows_s + m * K, K / 8, lane);
    else
      norm_row_scalar<T>(p, x + m * K, rows_s + m * K, lane);
  }
}

// Folds the lanes' partial sums of kM rows into totals: log2(kM) halving steps (at offsets 16, 8, ...: each lane
// keeps one half of its rows, adds its partner's partial sums of that half and hands over the other half), then a
// plain reduction over the remaining offsets. Afterwards every lane holds the total of row row_of_lane<kM>(lane).
template <int kM>
__device__ __forceinline__ float fold_rows(float (&v)[kM], int lane) {
#pragma unroll
  for (int half = kM / 2, o = 16; half >= 1; half /= 2, o /= 2) {
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float give = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, give, o);
    }
  }
  float total = v[0];
#pragma unroll
  for (int o = 16 / kM; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  return total;
}

template <int kM>
__device__ __forceinline__ int row_of_lane(int lane) {
  int m = 0;
#pragma unroll
  for (int half = kM / 2, o = 16; half >= 1; half /= 2, o /= 2)
    if (lane & o) m += half;
  return m;
}

// The lowest lane holding each row's total after fold_rows.
template <int kM>
__device__ __forceinline__ bool holds_row(int lane) {
  return (lane & (32 / kM - 1)) == 0;
}

// One input row, one pass over each weight row (packs <= 32 * split * kC), and a norm only when a warp owns a row
// (split == 1). NW: the storage of the norm's parameters; kC: packs a lane loads (1 to kChunks, the registers it
// holds). Three blocks per SM at least (at most 85 registers a thread), so that one wave of warps covers 3168 weight
// rows: GPT-2's widest products (3072 rows) in one pass.
constexpr int kOneRowBlocksPerSm = 3;
template <typename T, typename NW, bool kDual, int kC>
__global__ void __launch_bounds__(kThreads, kOneRowBlocksPerSm) one_row_kernel(Params p) {
  __shared__ float partial[kWarps], partial2[kWarps];
  allow_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int split = p.split, rows_per_tile = kWarps / split;
  const int row_in_tile = warp / split, slice = warp % split;
  const int64_t tiles = (p.N + rows_per_tile - 1) / rows_per_tile;
  const int64_t packs = p.K / 8, stride = 32 * static_cast<int64_t>(split);
  const int64_t first_pack = slice * 32 + lane;  // this lane's packs: first_pack + c * stride
  if (threadIdx.x == 0) {
    prefetch_tile<T, true, kDual>(p, blockIdx.x, rows_per_tile);
    prefetch_norm(p, true);
  }
  const T* weight = static_cast<const T*>(p.weight);
  const T* weight2 = static_cast<const T*>(p.weight2);
  Pack<T, true> w[kC], w2[kDual ? kC : 1];
  const auto load_weights = [&](int64_t n) {
    if (n >= p.N) return;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t q = first_pack + c * stride;
      if (q < packs) {
        w[c].load(weight + n * p.K + 8 * q);
        if constexpr (kDual) w2[c].load(weight2 + n * p.K + 8 * q);
      }
    }
  };
  const bool finisher = slice == 0 && lane == 0;
  int64_t n = static_cast<int64_t>(blockIdx.x) * rows_per_tile + row_in_tile;

  wait_for_prerequisites();  // the input row (and the residual) come from the kernels before
  load_weights(n);
  Pack<T, true> h[kC];  // the input at this lane's packs, then normed and rounded as a norm kernel stores it
  Pack<NW, true> nw[kC], nb[kC];
  const T* x = static_cast<const T*>(p.x);
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const int64_t q = first_pack + c * stride;
    if (q >= packs) continue;
    h[c].load_cached(x + 8 * q);
    if (p.norm != kNormNone) {
      nw[c].load_cached(static_cast<const NW*>(p.norm_w) + 8 * q);
      if (p.norm_b) nb[c].load_cached(static_cast<const NW*>(p.norm_b) + 8 * q);
    }
  }
  EpilogueInputs e;
  if (finisher && n < p.N) e = load_epilogue<T>(p, 0, n);
  if (p.norm != kNormNone) {
    // A warp owns the row (split == 1) and its lanes' packs cover the input: whole-warp statistics.
    const float inv_k = 1.f / static_cast<float>(p.K);
    float mu = 0.f;
    if (p.norm == kNormLayer) {
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        if (first_pack + c * stride >= packs) continue;
        float v[8];
        h[c].unpack(v);
#pragma unroll
        for (int i = 0; i < 8; ++i) s += v[i];
      }
      mu = warp_sum(s) * inv_k;
    }
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (first_pack + c * stride >= packs) continue;
      float v[8];
      h[c].unpack(v);
#pragma unroll
      for (int i = 0; i < 8; ++i) sq += (v[i] - mu) * (v[i] - mu);
    }
    const float rs = 1.f / sqrtf(warp_sum(sq) * inv_k + p.eps);
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (first_pack + c * stride >= packs) continue;
      float v[8], g[8], b[8] = {};
      h[c].unpack(v);
      nw[c].unpack(g);
      if (p.norm_b) nb[c].unpack(b);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = (v[i] - mu) * rs * g[i] + b[i];
      h[c].pack(v);
    }
  }

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (tile != blockIdx.x) {
      n = tile * rows_per_tile + row_in_tile;
      load_weights(n);
      if (finisher && n < p.N) e = load_epilogue<T>(p, 0, n);
    }
    if (threadIdx.x == 0 && tile + gridDim.x < tiles) prefetch_tile<T, true, kDual>(p, tile + gridDim.x, rows_per_tile);
    const bool live = n < p.N;
    float acc = 0.f, acc2 = 0.f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (!live || first_pack + c * stride >= packs) continue;
      float hv[8], wv[8];
      h[c].unpack(hv);
      w[c].unpack(wv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(hv[i], wv[i], acc);
      if constexpr (kDual) {
        w2[c].unpack(wv);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc2 = fmaf(hv[i], wv[i], acc2);
      }
    }
    acc = warp_sum(acc);
    if constexpr (kDual) acc2 = warp_sum(acc2);
    if (split == 1) {
      if (finisher && live) finish<T>(p, 0, n, acc, acc2, e);
    } else {
      if (lane == 0) {
        partial[warp] = acc;
        partial2[warp] = acc2;
      }
      __syncthreads();
      if (finisher && live) {
        float v = 0.f, v2 = 0.f;
        for (int s = 0; s < split; ++s) {
          v += partial[warp + s];
          v2 += partial2[warp + s];
        }
        finish<T>(p, 0, n, v, v2, e);
      }
      __syncthreads();  // the partial sums are rewritten by the next tile
    }
  }
}

template <typename T, int kM, bool kVec, bool kDual>
__global__ void __launch_bounds__(kThreads) rows_kernel(Params p) {
  constexpr int kPack = kVec ? 8 : 1;
  extern __shared__ float4 shared_words[];
  T* rows_s = reinterpret_cast<T*>(shared_words);
  // After the rows (rounded up to 16 bytes): the per-warp partial sums, [kWarps][kM] (and again for weight2).
  float* partial = reinterpret_cast<float*>(reinterpret_cast<char*>(shared_words) +
                                            (p.rows * p.K * static_cast<int64_t>(sizeof(T)) + 15) / 16 * 16);
  float* partial2 = partial + kWarps * kM;

  allow_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int split = p.split, rows_per_tile = kWarps / split;
  const int row_in_tile = warp / split, slice = warp % split;
  const int64_t tiles = (p.N + rows_per_tile - 1) / rows_per_tile;
  if (threadIdx.x == 0) {
    prefetch_tile<T, kVec, kDual>(p, blockIdx.x, rows_per_tile);
    prefetch_norm(p, kVec);
  }

  const int64_t packs = kVec ? p.K / 8 : p.K;  // of a weight row
  const int64_t stride = 32 * static_cast<int64_t>(split);
  const int64_t per_pass = stride * kChunks;
  const T* weight = static_cast<const T*>(p.weight);
  const T* weight2 = static_cast<const T*>(p.weight2);
  const int64_t first_pack = slice * 32 + lane;
  Pack<T, kVec> w[kChunks], w2[kDual ? kChunks : 1];
  const auto load_pass = [&](int64_t n, int64_t base) {
    const bool live = n < p.N;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t q = base + c * stride;
      if (live && q < packs) {
        w[c].load(weight + n * p.K + q * kPack);
        if constexpr (kDual) w2[c].load(weight2 + n * p.K + q * kPack);
      }
    }
  };

  // The output (row m_out, n) this lane finishes, if any: after fold_rows a holder lane of row m when a warp owns an
  // output row, else lane m of the row's first warp.
  const int m_out = split == 1 ? row_of_lane<kM>(lane) : lane;
  const bool finisher = (split == 1 ? holds_row<kM>(lane) : slice == 0) && m_out < p.rows;
  const auto load_inputs = [&](int64_t n) {
    return finisher && n < p.N ? load_epilogue<T>(p, m_out, n) : EpilogueInputs{};
  };

  wait_for_prerequisites();  // the input rows (and the residual) come from the kernels before
  // The first tile's first pass of weights and its epilogue operands are in flight while the rows are staged.
  const int64_t first_n = static_cast<int64_t>(blockIdx.x) * rows_per_tile + row_in_tile;
  load_pass(first_n, first_pack);
  EpilogueInputs e = load_inputs(first_n);
  stage_rows<T, kVec>(p, rows_s);
  __syncthreads();

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (threadIdx.x == 0 && tile + gridDim.x < tiles) prefetch_tile<T, kVec, kDual>(p, tile + gridDim.x, rows_per_tile);
    const int64_t n = tile * rows_per_tile + row_in_tile;
    const bool live = n < p.N;
    if (tile != blockIdx.x) e = load_inputs(n);
    float acc[kM], acc2[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[m] = acc2[m] = 0.f;

    for (int64_t base = first_pack; base < packs; base += per_pass) {
      // Every load of the pass first, so they are all in flight together (the first tile's first pass already is).
      if (tile != blockIdx.x || base != first_pack) load_pass(n, base);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int64_t q = base + c * stride;
        if (!(live && q < packs)) continue;
        float wv[kPack], w2v[kPack];
        w[c].unpack(wv);
        if constexpr (kDual) w2[c].unpack(w2v);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= p.rows) break;
          float h[kPack];
          load_row_values<T, kVec>(rows_s + m * p.K + q * kPack, h);
#pragma unroll
          for (int i = 0; i < kPack; ++i) {
            acc[m] = fmaf(h[i], wv[i], acc[m]);
            if constexpr (kDual) acc2[m] = fmaf(h[i], w2v[i], acc2[m]);
          }
        }
      }
    }

    const float total = fold_rows<kM>(acc, lane);
    const float total2 = kDual ? fold_rows<kM>(acc2, lane) : 0.f;
    if (split == 1) {
      if (finisher && live) finish<T>(p, m_out, n, total, total2, e);
    } else {
      if (holds_row<kM>(lane)) {
        const int m = row_of_lane<kM>(lane);
        partial[warp * kM + m] = total;
        if constexpr (kDual) partial2[warp * kM + m] = total2;
      }
      __syncthreads();
      if (finisher && live) {
        float v = 0.f, v2 = 0.f;
        for (int s = 0; s < split; ++s) {
          v += partial[(warp + s) * kM + m_out];
          if constexpr (kDual) v2 += partial2[(warp + s) * kM + m_out];
        }
        finish<T>(p, m_out, n, v, v2, e);
      }
      __syncthreads();  // the partial sums are rewritten by the next tile
    }
  }
}

// Shared memory of one block: the rows (padded to 16 bytes) and the partial sums of both weights.
size_t shared_bytes(int64_t rows, int64_t K, size_t element, int kM) {
  return (static_cast<size_t>(rows * K) * element + 15) / 16 * 16 + 2 * kWarps * kM * sizeof(float);
}

template <typename T, int kM, bool kVec, bool kDual>
void launch(const Params& p, int64_t tiles, bool dependent) {
  static KernelFacts facts;
  const size_t shared = shared_bytes(p.rows, p.K, sizeof(T), kM);
  auto* kernel = &rows_kernel<T, kM, kVec, kDual>;
  // One wave of blocks at most: the rest of the tiles go round the grid-stride loop.
  const int64_t resident =
      static_cast<int64_t>(sm_count()) *
      std::min(kTilesPerSm, blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, shared, facts));
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(tiles, resident)));
  launch_dependent(kernel, dim3(grid), dim3(kThreads), shared, rc::current_stream(), dependent, p);
}

template <typename T, typename NW, bool kDual, int kC>
void launch_one_row(const Params& p, int64_t tiles, bool dependent) {
  static KernelFacts facts;
  auto* kernel = &one_row_kernel<T, NW, kDual, kC>;
  const int64_t resident =
      static_cast<int64_t>(sm_count()) *
      std::min(kTilesPerSm, blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, 0, facts));
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(tiles, resident)));
  launch_dependent(kernel, dim3(grid), dim3(kThreads), 0, rc::current_stream(), dependent, p);
}

template <typename T, typename NW, bool kDual>
void launch_one_row_chunks(const Params& p, int64_t tiles, bool dependent) {
  const int64_t stride = 32 * static_cast<int64_t>(p.split);
  switch ((p.K / 8 + stride - 1) / stride) {
    case 1:
      return launch_one_row<T, NW, kDual, 1>(p, tiles, dependent);
    case 2:
      return launch_one_row<T, NW, kDual, 2>(p, tiles, dependent);
    case 3:
      return launch_one_row<T, NW, kDual, 3>(p, tiles, dependent);
    default:
      return launch_one_row<T, NW, kDual, 4>(p, tiles, dependent);
  }
}

template <typename T, bool kDual>
void launch_one_row_norm(const Params& p, int64_t tiles, bool dependent) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.norm_f32) return launch_one_row_chunks<T, float, kDual>(p, tiles, dependent);
  }
  launch_one_row_chunks<T, T, kDual>(p, tiles, dependent);
}

template <typename T, bool kVec, bool kDual>
void launch_rows(const Params& p, int64_t tiles, bool dependent) {
  if (p.rows <= 1) return launch<T, 1, kVec, kDual>(p, tiles, dependent);
  if (p.rows <= 2) return launch<T, 2, kVec, kDual>(p, tiles, dependent);
  if (p.rows <= 4) return launch<T, 4, kVec, kDual>(p, tiles, dependent);
  return launch<T, 8, kVec, kDual>(p, tiles, dependent);
}

// Packs of 8 when every row the kernels read starts on a 16-byte boundary.
bool vectorizable(const Params& p) {
  return p.K % 8 == 0 && aligned16(p.x) && aligned16(p.weight) && (!p.weight2 || aligned16(p.weight2)) &&
         (!p.norm_w || aligned16(p.norm_w)) && (!p.norm_b || aligned16(p.norm_b));
}

// One launch of the CUDA-core kernels for at most 8 rows.
void launch_cuda_cores(Params p, DType dtype, bool dependent) {
  const int64_t M = p.rows, K = p.K, N = p.N;
  const bool vec = vectorizable(p);
  const int64_t packs = vec ? K / 8 : K;
  // Warps per row: few enough packs per lane for one pass, then more while the tiles would leave SMs idle.
  int split = 1;
  while (split < kWarps && packs > 32 * split * kChunks) split *= 2;
  const auto tiles_for = [&](int s) { return (N + kWarps / s - 1) / (kWarps / s); };
  while (split < kWarps && tiles_for(split) < sm_count() && packs >= 64 * split) split *= 2;
  p.split = split;
  const int64_t tiles = tiles_for(split);
  const bool dual = p.weight2 != nullptr;
  // One row in one pass, normed only where a warp owns a weight row: the kernel without shared-memory staging.
  const bool one_row = vec && M == 1 && packs <= 32 * split * kChunks && (p.norm == kNormNone || split == 1);
  dispatch_float(dtype, "small_m_linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (one_row) {
      if (dual)
        launch_one_row_norm<T, true>(p, tiles, dependent);
      else
        launch_one_row_norm<T, false>(p, tiles, dependent);
    } else if (vec) {
      if (dual)
        launch_rows<T, true, true>(p, tiles, dependent);
      else
        launch_rows<T, true, false>(p, tiles, dependent);
    } else {
      // One value per load: any K, any alignment (a reference path more than a fast one).
      if (dual)
        launch<T, 8, false, true>(p, tiles, dependent);
      else
        launch<T, 8, false, false>(p, tiles, dependent);
    }
  });
}

}  // namespace

void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out) {
  rc::DeviceGuard guard(device_of(x, "small_m_linear"));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (M == 0 || N == 0) return;
  Params p{};
  p.x = x.raw_data();
  p.weight = weight.raw_data();
  p.weight2 = weight2.defined() ? weight2.raw_data() : nullptr;
  p.bias = bias.defined() ? bias.raw_data() : nullptr;
  p.bias2 = bias2.defined() ? bias2.raw_data() : nullptr;
  p.norm_w = norm.weight.defined() ? norm.weight.raw_data() : nullptr;
  p.norm_b = norm.bias.defined() ? norm.bias.raw_data() : nullptr;
  p.residual = residual.defined() ? residual.raw_data() : nullptr;
  p.out = out.raw_data();
  p.rows = M;
  p.K = K;
  p.N = N;
  p.norm = norm.kind == RowNormKind::LayerNorm ? kNormLayer : norm.kind == RowNormKind::RmsNorm ? kNormRms : kNormNone;
  p.norm_f32 = norm.weight.defined() && norm.weight.dtype() == DType::F32;
  p.epilogue = epilogue == LinearEpilogue::Gelu       ? kEpiGelu
               : epilogue == LinearEpilogue::Residual ? kEpiResidual
               : epilogue == LinearEpilogue::SwiGlu   ? kEpiSwiGlu
                                                      : kEpiNone;
  p.eps = norm.eps;
  const bool dependent = decode_dependent_launch_enabled() && dependent_launch_supported();
  if (mma_takes(p, x.dtype(), vectorizable(p))) return launch_mma(p, dependent);
  // The CUDA-core kernels take up to 8 rows a launch, as many as fit kSmallMSharedBytes (small_m_linear_fits checked
  // that one does): more rows (f32, or rows the tensor-core kernel does not take) go in groups, a launch each.
  const size_t element = dtype_size(x.dtype());
  const int64_t group =
      std::clamp<int64_t>(kSmallMSharedBytes / (K * static_cast<int64_t>(element)), 1, static_cast<int64_t>(kWarps));
  for (int64_t first = 0; first < M; first += group) {
    Params g = p;
    g.rows = std::min<int64_t>(group, M - first);
    g.x = static_cast<const char*>(p.x) + first * K * element;
    g.out = static_cast<char*>(p.out) + first * N * element;
    if (p.residual) g.residual = static_cast<const char*>(p.residual) + first * N * element;
    launch_cuda_cores(g, x.dtype(), dependent);
  }
}

}  // namespace retort::kernels::cuda
