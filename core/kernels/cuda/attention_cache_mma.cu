// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The decode step's attention over a bf16 key/value cache on the tensor cores: one block per row and key/value head
// attends all its query heads and new positions at once (up to 16 query rows), reading each cached key and value
// once. The CUDA-core decode kernel (attention_cache.cu) spends about 15 warp instructions a key on conversions,
// shuffle reductions and per-key softmax updates, and a warp waits for its loads once per 4 keys; here
//   - the block stages the keys and values in chunks (128 rows at head size 64, 64 at 128) in swizzled shared
//     memory with cp.async, two chunks in flight from the start, so a context of a few hundred positions is one
//     round trip to memory rather than one per tile (rows at or past the row's start come straight from the new k
//     and v, which the block also appends to the cache, so nothing waits for the append);
//   - each warp takes 16-key tiles of a chunk: S = Q K^T and O += P V in mma.sync m16n8k16 (K through ldmatrix,
//     V through ldmatrix.trans, Q's fragments in registers for the whole walk), P reused from S's accumulators;
//   - P is split into bf16 hi + lo parts (two products per output tile), so the weights keep about 16 significant
//     bits and the result matches the float32 CUDA-core kernel's accuracy, not bf16's.
//
// Softmax: scores in log2 units, a per-row running maximum that is moved only when a tile's maximum passes it by
// more than 2^8 (weights stay below 2^8, far from float32's range), the row sums kept per lane until the end. The
// warps merge through shared memory (the chunks' buffers, no longer needed).
#include "core/kernels/cuda/attention_cache_mma.h"
#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/cuda/mma_tiles.cuh"
#include "core/kernels/cuda/ptx.cuh"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLazyRescale = 8.f;  // log2 units the running maximum may lag behind a tile's
constexpr unsigned kFull = 0xffffffffu;

// Cache rows per chunk: 16 KiB of keys and 16 KiB of values, two chunks in flight (64 KiB a block: three blocks a
// multiprocessor, which holds a batch-32 GPT-2 step's 384 blocks in one wave).
template <int kHead>
constexpr int kChunkRows = 128 * 64 / kHead;
template <int kHead>
constexpr size_t kSharedBytes = 2 * 2 * kChunkRows<kHead>* kHead * sizeof(detail::bf16);

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFull, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFull, v, 2));
}

// Two weights as bf16 hi parts and the bf16 rounding of what the hi parts miss.
__device__ __forceinline__ void split_bf16(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
  const __nv_bfloat162 l = __floats2bfloat162_rn(p0 - h0, p1 - h1);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// kHead: 64 or 128. kRows16: more than 8 query rows (the fragments' rows g + 8 in use).
template <int kHead, bool kRows16>
__global__ void __launch_bounds__(kThreads) cache_decode_kernel(CacheDecodeArgs a, float scale_log2) {
  constexpr int kChunk = kChunkRows<kHead>, kRowPieces = kHead / 8, kKSteps = kHead / 16;
  constexpr int kMaxRows = kRows16 ? 16 : 8;
  constexpr int kStride = kHead + 4;  // floats per merge row, padded against bank conflicts
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* stage_keys = reinterpret_cast<bf16*>(shared);    // [2][kChunk][kHead], swizzled
  bf16* stage_values = stage_keys + 2 * kChunk * kHead;  // [2][kChunk][kHead], swizzled
  float* merge_o = reinterpret_cast<float*>(shared);     // [kWarps][kMaxRows][kStride], after the walk
  __shared__ float s_m[kWarps][kMaxRows], s_l[kWarps][kMaxRows], s_f[kWarps][kMaxRows];
  // A product launched as this kernel's programmatic dependent may start prefetching its weights now.
  allow_dependents();

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int KV = static_cast<int>(a.KV), group = static_cast<int>(a.H / a.KV), tn = static_cast<int>(a.Tn);
  const int rows = group * tn, cap = static_cast<int>(a.cap);
  const int b = static_cast<int>(blockIdx.x) / KV, kv = static_cast<int>(blockIdx.x) - b * KV;
  const int64_t head_offset = (static_cast<int64_t>(b) * KV + kv) * a.cap * kHead;
  bf16* keys = a.k_cache + head_offset;
  bf16* values = a.v_cache + head_offset;
  const int64_t new_offset = static_cast<int64_t>(b) * tn * a.kv_stride + static_cast<int64_t>(kv) * kHead;

  // While the q|k|v product before this kernel runs: move this head's cached rows towards L2 (one thread per
  // 32 KiB; the row count read here only sizes the prefetch, which never leaves the cache).
  {
    const int64_t cached = min(max(static_cast<int64_t>(a.starts[b]), int64_t{0}), a.cap);
    const int64_t bytes = cached * kHead * static_cast<int64_t>(sizeof(bf16));
    constexpr int64_t kPiece = 32 * 1024;
    for (int64_t at = threadIdx.x * kPiece; at < bytes; at += kThreads * kPiece) {
      const uint32_t piece = static_cast<uint32_t>(min(kPiece, bytes - at));
      prefetch_l2(reinterpret_cast<const char*>(keys) + at, piece);
      prefetch_l2(reinterpret_cast<const char*>(values) + at, piece);
    }
  }
  wait_for_prerequisites();
  const int start = a.starts[b];
  const int seen_all = min(start + tn, cap);  // keys the last new position sees
  const int chunks = (seen_all + kChunk - 1) / kChunk;

  // Chunk i into stage s: cache rows below start, the new rows from k and v, zeros past seen_all. A thread copies
  // one 16-byte column piece of every (kThreads / kRowPieces)-th row.
  const auto stage_chunk = [&](int i, int s) {
    constexpr int kRowStep = kThreads / kRowPieces;
    const int piece = threadIdx.x % kRowPieces;
    bf16* sk = stage_keys + s * kChunk * kHead;
    bf16* sv = stage_values + s * kChunk * kHead;
#pragma unroll 4
    for (int r = threadIdx.x / kRowPieces; r < kChunk; r += kRowStep) {
      const int j = i * kChunk + r;
      const bool valid = j < seen_all;
      const int64_t at = j < start ? static_cast<int64_t>(j) * kHead : new_offset + (j - start) * a.kv_stride;
      const bf16* k_src = j < start ? keys : a.k_new;
      const bf16* v_src = j < start ? values : a.v_new;
      const int64_t src = valid ? at + piece * 8 : 0;
      ptx::cp_async16(ptx::smem_addr(sk + tiles::swizzle<kHead>(r, piece)), k_src + src, valid);
      ptx::cp_async16(ptx::smem_addr(sv + tiles::swizzle<kHead>(r, piece)), v_src + src, valid);
    }
    ptx::cp_async_commit();
  };
  stage_chunk(0, 0);
  if (chunks > 1) stage_chunk(1, 1);

  // The append (positions past the cache are dropped); this block alone reads these rows, from k and v above.
  for (int i = threadIdx.x; i < tn * kRowPieces; i += kThreads) {
    const int t = i / kRowPieces, piece = i - t * kRowPieces, pos = start + t;
    if (pos >= cap) continue;
    const int64_t src = new_offset + t * a.kv_stride + piece * 8;
    const int64_t dst = static_cast<int64_t>(pos) * kHead + piece * 8;
    *reinterpret_cast<uint4*>(keys + dst) = *reinterpret_cast<const uint4*>(a.k_new + src);
    *reinterpret_cast<uint4*>(values + dst) = *reinterpret_cast<const uint4*>(a.v_new + src);
  }

  // Q's A fragments (rows g and g + 8; row r is new position r / group of query head kv * group + r % group, rows
  // past `rows` zero), kept for the whole walk.
  const auto query_word = [&](int r, int d) -> uint32_t {
    if (r >= rows) return 0u;
    const int t = r / group, head = kv * group + (r - t * group);
    return *reinterpret_cast<const uint32_t*>(a.q + (static_cast<int64_t>(b) * tn + t) * a.q_stride +
                                              static_cast<int64_t>(head) * kHead + d);
  };
  uint32_t qa[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    qa[kk][0] = query_word(g, kk * 16 + 2 * c);
    qa[kk][1] = kRows16 ? query_word(g + 8, kk * 16 + 2 * c) : 0u;
    qa[kk][2] = query_word(g, kk * 16 + 8 + 2 * c);
    qa[kk][3] = kRows16 ? query_word(g + 8, kk * 16 + 8 + 2 * c) : 0u;
  }
  const auto seen_of = [&](int r) { return r < rows ? min(start + r / group + 1, cap) : seen_all; };
  const int seen_lo = seen_of(g), seen_hi = seen_of(g + 8);

  float o[kHead / 8][4];
#pragma unroll
  for (int m = 0; m < kHead / 8; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;

  for (int i = 0; i < chunks; ++i) {
    if (i + 1 < chunks) {
      ptx::cp_async_wait<1>();
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* sk = stage_keys + (i & 1) * kChunk * kHead;
    const bf16* sv = stage_values + (i & 1) * kChunk * kHead;
    for (int t0 = warp * kTileKeys; t0 < kChunk && i * kChunk + t0 < seen_all; t0 += kWarps * kTileKeys) {
      const int j0 = i * kChunk + t0;
      // S for the tile's two halves of 8 keys.
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t r[4];
        ptx::ldmatrix_x4(r, tiles::bt_addr<kHead>(sk, t0, kk * 16, lane));
        ptx::mma(s[0], qa[kk], r[0], r[1]);
        ptx::mma(s[1], qa[kk], r[2], r[3]);
      }

      // Scores in log2 units, keys a row does not see at -inf; the rows' maxima over the tile.
      float top_lo = -INFINITY, top_hi = -INFINITY;
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = j0 + half * 8 + 2 * c + e;
          s[half][e] = j < seen_lo ? s[half][e] * scale_log2 : -INFINITY;
          s[half][2 + e] = j < seen_hi ? s[half][2 + e] * scale_log2 : -INFINITY;
          top_lo = fmaxf(top_lo, s[half][e]);
          top_hi = fmaxf(top_hi, s[half][2 + e]);
        }
      top_lo = quad_max(top_lo);
      float scale_lo = 1.f, scale_hi = 1.f;  // exp2(old maximum - new): 0 on a row's first keys
      if (top_lo > m_lo + kLazyRescale) scale_lo = ptx::exp2_ftz(m_lo - top_lo), m_lo = top_lo;
      if constexpr (kRows16) {
        top_hi = quad_max(top_hi);
        if (top_hi > m_hi + kLazyRescale) scale_hi = ptx::exp2_ftz(m_hi - top_hi), m_hi = top_hi;
      }
      if (__any_sync(kFull, scale_lo != 1.f || scale_hi != 1.f)) {
        l_lo *= scale_lo, l_hi *= scale_hi;
#pragma unroll
        for (int m = 0; m < kHead / 8; ++m)
          o[m][0] *= scale_lo, o[m][1] *= scale_lo, o[m][2] *= scale_hi, o[m][3] *= scale_hi;
      }
      // A row that has seen no key yet has m = -inf and only -inf scores: its weights are exp2(-inf) = 0.
      const float ref_lo = m_lo == -INFINITY ? 0.f : m_lo, ref_hi = m_hi == -INFINITY ? 0.f : m_hi;
      uint32_t p_hi[4] = {0u, 0u, 0u, 0u}, p_lo[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float w0 = ptx::exp2_ftz(s[half][0] - ref_lo), w1 = ptx::exp2_ftz(s[half][1] - ref_lo);
        l_lo += w0 + w1;
        split_bf16(w0, w1, p_hi[2 * half], p_lo[2 * half]);
        if constexpr (kRows16) {
          const float w2 = ptx::exp2_ftz(s[half][2] - ref_hi), w3 = ptx::exp2_ftz(s[half][3] - ref_hi);
          l_hi += w2 + w3;
          split_bf16(w2, w3, p_hi[2 * half + 1], p_lo[2 * half + 1]);
        }
      }

      // O += P V, 16 output columns per ldmatrix.trans.
#pragma unroll
      for (int nd = 0; nd < kHead / 16; ++nd) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, tiles::b_addr<kHead>(sv, t0, nd * 16, lane));
        ptx::mma(o[2 * nd], p_hi, r[0], r[1]);
        ptx::mma(o[2 * nd], p_lo, r[0], r[1]);
        ptx::mma(o[2 * nd + 1], p_hi, r[2], r[3]);
        ptx::mma(o[2 * nd + 1], p_lo, r[2], r[3]);
      }
    }
    __syncthreads();  // the stage is read by every warp before it is refilled
    if (i + 2 < chunks) stage_chunk(i + 2, i & 1);
  }

  // Merge the warps: each writes its rows' maximum, sum and unnormalised output (o[m][e] is column 8 m + 2 c + e).
  l_lo += __shfl_xor_sync(kFull, l_lo, 1);
  l_lo += __shfl_xor_sync(kFull, l_lo, 2);
  l_hi += __shfl_xor_sync(kFull, l_hi, 1);
  l_hi += __shfl_xor_sync(kFull, l_hi, 2);
  const auto stash = [&](int r, float m_r, float l_r, int first) {
    if (r >= rows) return;
    if (c == 0) s_m[warp][r] = m_r, s_l[warp][r] = l_r;
    float* dst = merge_o + (warp * kMaxRows + r) * kStride;
#pragma unroll
    for (int m = 0; m < kHead / 8; ++m)
      *reinterpret_cast<float2*>(dst + 8 * m + 2 * c) = make_float2(o[m][first], o[m][first + 1]);
  };
  stash(g, m_lo, l_lo, 0);
  if constexpr (kRows16) stash(g + 8, m_hi, l_hi, 2);
  __syncthreads();
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, s_m[w][r]);
    float factor[kWarps], total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      factor[w] = s_m[w][r] == -INFINITY ? 0.f : ptx::exp2_ftz(s_m[w][r] - top);
      total += s_l[w][r] * factor[w];
    }
    const float inv = 1.f / total;  // key 0 is seen by every row, so total >= 1
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s_f[w][r] = factor[w] * inv;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * kRowPieces; i += kThreads) {
    const int r = i / kRowPieces, d0 = (i - r * kRowPieces) * 8;
    const int t = r / group, head = kv * group + (r - t * group);
    float sum[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) sum[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* src = merge_o + (w * kMaxRows + r) * kStride + d0;
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[e] += src[e] * s_f[w][r];
    }
    store8(a.out + ((static_cast<int64_t>(b) * tn + t) * a.H + head) * kHead + d0, sum);
  }
}

template <int kHead, bool kRows16>
void launch(const CacheDecodeArgs& a, float scale_log2, bool dependent) {
  static_assert(kWarps * (kRows16 ? 16 : 8) * (kHead + 4) * sizeof(float) <= kSharedBytes<kHead>);
  // Per device and kernel; cheap enough to repeat on every launch.
  RETORT_CUDA_CHECK(cudaFuncSetAttribute(cache_decode_kernel<kHead, kRows16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSharedBytes<kHead>)));
  launch_dependent(&cache_decode_kernel<kHead, kRows16>, dim3(static_cast<unsigned>(a.B * a.KV)), dim3(kThreads),
                   kSharedBytes<kHead>, rc::current_stream(), dependent, a, scale_log2);
}

}  // namespace

bool cache_decode_mma_fits(const CacheDecodeArgs& a) {
  const int64_t group = a.H / a.KV;
  return (a.D == 64 || a.D == 128) && group * a.KV == a.H && group * a.Tn <= 16 && a.cap < (int64_t{1} << 30) &&
         aligned16(a.q) && aligned16(a.k_new) && aligned16(a.v_new) && aligned16(a.k_cache) && aligned16(a.v_cache) &&
         aligned16(a.out) && a.q_stride % 8 == 0 && a.kv_stride % 8 == 0;
}

bool cache_decode_mma_enough_blocks(const CacheDecodeArgs& a) {
  return a.B * a.KV >= sm_count();
}

void cache_decode_mma(const CacheDecodeArgs& a, bool dependent_launch) {
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(a.D));
  const bool rows16 = a.H / a.KV * a.Tn > 8;
  if (a.D == 64) {
    rows16 ? launch<64, true>(a, scale_log2, dependent_launch) : launch<64, false>(a, scale_log2, dependent_launch);
  } else {
    rows16 ? launch<128, true>(a, scale_log2, dependent_launch) : launch<128, false>(a, scale_log2, dependent_launch);
  }
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::kernels::cuda
