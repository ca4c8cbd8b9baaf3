// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The decode step's attention over a bf16 key/value cache on the tensor cores: one block per row and key/value head
// attends all its query heads and new positions at once (up to 16 query rows), reading each cached key and value
// once. The CUDA-core decode kernel (attention_cache.cu) spends about 15 warp instructions a key on conversions,
// shuffle reductions and per-key softmax updates; here a warp takes 16 keys at a time in 3 D / 8 products
// (m16n8k16: D / 8 for S, twice D / 8 for O) and about 60 other instructions, half the CUDA-core kernel's count at
// GPT-2 small's batch-32 step. There both kernels wait on a few memory round trips and run as fast
// (docs/benchmarks.md); with grouped-query heads this one reads each cached key once per group, not once per head.
//
// The operands come from global memory straight into the products' register layouts, without shared memory:
//   S = Q K^T   Q's rows are the queries (row g of the fragment is query row g; 8 more when there are 16), K^T's
//               columns the 8 keys of a half tile. A dot product does not care which head dimension meets which, so
//               lane (g, c) loads 16 contiguous bytes of its key (dims 32p + 8c .. + 7) and of its query rows, and
//               those four 32-bit words are the two k-steps' halves of the fragment for both operands alike.
//   O = P V     P is S's accumulator reused as the A operand (the usual flash-attention register reuse). V's
//               fragment wants two keys' values at one dimension per register, so lane (g, c) loads the whole
//               slice of dims (D / 8) g .. + D / 8 - 1 of keys 2c, 2c + 1, 2c + 8 and 2c + 9 and pairs them with one
//               byte permute per register: output column n of product m is dimension (D / 8) n + m, undone when
//               the output is written.
//   P           is split into bf16 hi + lo parts (two products per output tile), so the weights keep about 16
//               significant bits and the result matches the float32 CUDA-core kernel's accuracy, not bf16's.
//
// Softmax: scores in log2 units, a per-row running maximum that is moved only when a tile's maximum passes it by
// more than 2^8 (weights stay below 2^8, far from float32's range), the row sums kept per lane until the end. The
// block's warps take tiles w, w + 4, ... (at head size 64 loading a tile's keys and values while the one before is
// multiplied) and merge through shared memory. The block appends the new keys and values to the cache (its own rows:
// no other block reads them) and reads those positions from the new k and v, so no load waits for the append.
#include <cmath>

#include "core/kernels/cuda/attention_cache_mma.h"
#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/cuda/ptx.cuh"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kWarps = 4;
constexpr int kTileKeys = 16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLazyRescale = 8.f;  // log2 units the running maximum may lag behind a tile's
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint4 load16(const bf16* p, bool valid) {
  return valid ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Two weights as bf16 hi parts and the bf16 rounding of what the hi parts miss.
__device__ __forceinline__ void split_bf16(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  hi = ptx::pack_bf16(p0, p1);
  const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
  lo = ptx::pack_bf16(p0 - h0, p1 - h1);
}

// kHead: 64 or 128. kRows16: more than 8 query rows (the fragment's rows g + 8 in use). kPrefetch: the next tile's
// keys and values are loaded before this tile's products (registers allow it at head size 64). kWarmCache: the
// block's cached rows are prefetched toward L2 before the wait for the kernel before (kWarmCacheMaxRows).
template <int kHead, bool kRows16, bool kPrefetch, bool kWarmCache>
__global__ void __launch_bounds__(kWarps * 32) cache_decode_kernel(CacheDecodeArgs a, float scale_log2) {
  constexpr int kPairs = kHead / 32;        // 16-byte pieces of a key row per lane, each two k-steps of S
  constexpr int kOut = kHead / 8;           // output products (8 columns each)
  constexpr int kValuePieces = kHead / 64;  // 16-byte pieces of a value row per lane
  constexpr int kMaxRows = kRows16 ? 16 : 8;
  constexpr int kStride = kHead + 4;  // floats per merge row, padded against bank conflicts
  __shared__ float s_o[kWarps][kMaxRows][kStride];
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

  // While the kernel before runs, if it lets this one start early: move this head's cached rows towards L2 (one
  // thread per 32 KiB; the row count read here only sizes the prefetch, which never leaves the cache).
  if constexpr (kWarmCache) {
    const int64_t cached = min(max(static_cast<int64_t>(a.starts[b]), int64_t{0}), a.cap);
    prefetch_pair_l2(keys, values, cached * kHead * static_cast<int64_t>(sizeof(bf16)));
  }
  wait_for_prerequisites();
  // Everything the block loads before its first product is issued here at once, so that the row's start (an L2
  // round trip) is not waited for before the loads that do not need it: the start itself, the query rows, the new
  // keys and values (appended below), and this warp's first two tiles as if all of their positions were cached (they
  // are below the start, in rows earlier steps wrote, unless the row is among its first positions: then a tile is
  // loaded again once the start is known).
  const int start_loaded = a.starts[b];

  constexpr int kRowPieces = kHead / 8;
  constexpr int kAppendPieces = (16 * kRowPieces + kWarps * 32 - 1) / (kWarps * 32);  // a thread's, Tn <= 16
  const int64_t new_offset = static_cast<int64_t>(b) * tn * a.kv_stride + static_cast<int64_t>(kv) * kHead;
  uint4 new_keys[kAppendPieces], new_values[kAppendPieces];
#pragma unroll
  for (int n = 0; n < kAppendPieces; ++n) {
    const int i = threadIdx.x + n * kWarps * 32;
    if (i >= tn * kRowPieces) continue;
    const int t = i / kRowPieces, piece = i - t * kRowPieces;
    const int64_t src = new_offset + t * a.kv_stride + piece * 8;
    new_keys[n] = *reinterpret_cast<const uint4*>(a.k_new + src);
    new_values[n] = *reinterpret_cast<const uint4*>(a.v_new + src);
  }

  // Query row r is new position r / group of query head kv * group + r % group; rows past `rows` are zero.
  const auto load_query = [&](int r, uint4(&q)[kPairs]) {
    const int t = r / group, head = kv * group + (r - t * group);
    const bf16* src = a.q + (static_cast<int64_t>(b) * tn + t) * a.q_stride + static_cast<int64_t>(head) * kHead;
#pragma unroll
    for (int p = 0; p < kPairs; ++p) q[p] = load16(src + 32 * p + 8 * c, r < rows);
  };
  uint4 q_lo[kPairs], q_hi[kPairs];
  load_query(g, q_lo);
  if constexpr (kRows16) {
    load_query(g + 8, q_hi);
  } else {
#pragma unroll
    for (int p = 0; p < kPairs; ++p) q_hi[p] = make_uint4(0, 0, 0, 0);
  }

  // Position j's key (or value) row: the cache below `start`, the new rows from `start` on. Positions at or past
  // `seen` load as zeros.
  const auto row_of = [&](const bf16* cache, const bf16* fresh, int j, int start) {
    return j < start ? cache + static_cast<int64_t>(j) * kHead : fresh + new_offset + (j - start) * a.kv_stride;
  };
  const auto load_keys = [&](int tile, uint4(&k)[2][kPairs], int start, int seen) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = tile * kTileKeys + half * 8 + g;
      const bf16* row = row_of(keys, a.k_new, j < seen ? j : 0, start);
#pragma unroll
      for (int p = 0; p < kPairs; ++p) k[half][p] = load16(row + 32 * p + 8 * c, j < seen);
    }
  };
  const auto load_values = [&](int tile, uint4(&v)[4][kValuePieces], int start, int seen) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = tile * kTileKeys + 2 * c + (i & 1) + (i >> 1) * 8;
      const bf16* row = row_of(values, a.v_new, j < seen ? j : 0, start);
#pragma unroll
      for (int p = 0; p < kValuePieces; ++p) v[i][p] = load16(row + g * (kHead / 8) + 8 * p, j < seen);
    }
  };
  uint4 k_cur[2][kPairs], k_next[2][kPairs], v_cur[4][kValuePieces], v_next[4][kValuePieces];
  // One past the ends of this warp's first two tiles; the second is read ahead the same way.
  const int first_end = (warp + 1) * kTileKeys, second_end = (warp + kWarps + 1) * kTileKeys;
  if (kPrefetch && first_end <= cap) load_keys(warp, k_cur, cap, cap), load_values(warp, v_cur, cap, cap);
  if (kPrefetch && second_end <= cap)
    load_keys(warp + kWarps, k_next, cap, cap), load_values(warp + kWarps, v_next, cap, cap);

  const int start = start_loaded;
  // The append (positions past the cache are dropped). This block alone reads these rows, and it reads them from
  // the new k and v (row_of), so nothing waits for the stores.
#pragma unroll
  for (int n = 0; n < kAppendPieces; ++n) {
    const int i = threadIdx.x + n * kWarps * 32;
    if (i >= tn * kRowPieces) continue;
    const int t = i / kRowPieces, piece = i - t * kRowPieces, pos = start + t;
    if (pos >= cap) continue;
    const int64_t dst = static_cast<int64_t>(pos) * kHead + piece * 8;
    *reinterpret_cast<uint4*>(keys + dst) = new_keys[n];
    *reinterpret_cast<uint4*>(values + dst) = new_values[n];
  }

  const int seen_all = min(start + tn, cap);  // keys the last new position sees
  const auto seen_of = [&](int r) { return r < rows ? min(start + r / group + 1, cap) : seen_all; };
  const int seen_lo = seen_of(g), seen_hi = seen_of(g + 8);

  float o[kOut][4];
#pragma unroll
  for (int m = 0; m < kOut; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;

  // A warp's tiles are warp, warp + kWarps, ...; at head size 64 the next tile's keys and values load while this
  // one is multiplied.
  const int tiles = (seen_all + kTileKeys - 1) / kTileKeys;
  // A tile loaded above holds cached rows only when it ends at or before the start (and so before seen_all:
  // nothing in it is masked); otherwise it is loaded again.
  const bool second_read = kPrefetch && second_end <= start && second_end <= cap;
  if (kPrefetch && warp < tiles && !(first_end <= start && first_end <= cap))
    load_keys(warp, k_cur, start, seen_all), load_values(warp, v_cur, start, seen_all);
  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int j0 = tile * kTileKeys;
    if constexpr (kPrefetch) {
      if (tile + kWarps < tiles && !(tile == warp && second_read))
        load_keys(tile + kWarps, k_next, start, seen_all), load_values(tile + kWarps, v_next, start, seen_all);
    } else {
      load_keys(tile, k_cur, start, seen_all);
      load_values(tile, v_cur, start, seen_all);
    }

    // S for the tile's two halves of 8 keys.
    float s[2][4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      s[half][0] = s[half][1] = s[half][2] = s[half][3] = 0.f;
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const uint32_t a0[4] = {q_lo[p].x, q_hi[p].x, q_lo[p].y, q_hi[p].y};
        ptx::mma(s[half], a0, k_cur[half][p].x, k_cur[half][p].y);
        const uint32_t a1[4] = {q_lo[p].z, q_hi[p].z, q_lo[p].w, q_hi[p].w};
        ptx::mma(s[half], a1, k_cur[half][p].z, k_cur[half][p].w);
      }
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
    top_lo = ptx::quad_max(top_lo);
    float scale_lo = 1.f, scale_hi = 1.f;  // exp2(old maximum - new): 0 on a row's first keys
    if (top_lo > m_lo + kLazyRescale) scale_lo = ptx::exp2_ftz(m_lo - top_lo), m_lo = top_lo;
    if constexpr (kRows16) {
      top_hi = ptx::quad_max(top_hi);
      if (top_hi > m_hi + kLazyRescale) scale_hi = ptx::exp2_ftz(m_hi - top_hi), m_hi = top_hi;
    }
    if (__any_sync(kFull, scale_lo != 1.f || scale_hi != 1.f)) {
      l_lo *= scale_lo, l_hi *= scale_hi;
#pragma unroll
      for (int m = 0; m < kOut; ++m) o[m][0] *= scale_lo, o[m][1] *= scale_lo, o[m][2] *= scale_hi, o[m][3] *= scale_hi;
    }
    // A row that has seen no key yet has m = -inf and only -inf scores: its weights are exp2(-inf) = 0.
    const float ref_lo = m_lo == -INFINITY ? 0.f : m_lo, ref_hi = m_hi == -INFINITY ? 0.f : m_hi;
    uint32_t p_hi[4] = {0, 0, 0, 0}, p_lo[4] = {0, 0, 0, 0};
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

    // O += P V: product m's column n is dimension (kHead / 8) n + m, which lane (g, c) holds at element m of
    // its value slices; keys 2c and 2c + 1 pair into one register, 2c + 8 and 2c + 9 into the other.
#pragma unroll
    for (int m = 0; m < kOut; ++m) {
      const int piece = m / 8, w = (m / 2) % 4;
      const uint32_t select = (m & 1) ? 0x7632u : 0x5410u;
      const uint32_t b0 = __byte_perm(word(v_cur[0][piece], w), word(v_cur[1][piece], w), select);
      const uint32_t b1 = __byte_perm(word(v_cur[2][piece], w), word(v_cur[3][piece], w), select);
      ptx::mma(o[m], p_hi, b0, b1);
      ptx::mma(o[m], p_lo, b0, b1);
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int p = 0; p < kPairs; ++p) k_cur[half][p] = k_next[half][p];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int p = 0; p < kValuePieces; ++p) v_cur[i][p] = v_next[i][p];
    }
  }

  // Merge the warps: each writes its rows' maximum, sum and unnormalised output.
  l_lo = ptx::quad_sum(l_lo);
  l_hi = ptx::quad_sum(l_hi);
  const auto stash = [&](int r, float m_r, float l_r, int first) {
    if (r >= rows) return;
    if (c == 0) s_m[warp][r] = m_r, s_l[warp][r] = l_r;
#pragma unroll
    for (int m = 0; m < kOut; ++m)
#pragma unroll
      for (int e = 0; e < 2; ++e) s_o[warp][r][(kHead / 8) * (2 * c + e) + m] = o[m][first + e];
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
  for (int i = threadIdx.x; i < rows * kRowPieces; i += blockDim.x) {
    const int r = i / kRowPieces, d0 = (i - r * kRowPieces) * 8;
    const int t = r / group, head = kv * group + (r - t * group);
    float sum[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) sum[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[e] += s_o[w][r][d0 + e] * s_f[w][r];
    store8(a.out + ((static_cast<int64_t>(b) * tn + t) * a.H + head) * kHead + d0, sum);
  }
}

// The query rows (B x new positions) up to which the cached rows are prefetched before the wait. The models run
// their decode steps on the fused kernels up to 16 rows by default (ops::decode_fusion), which let the next kernel
// start early, so the prefetch overlaps them; past that the products before are cuBLAS's, this kernel starts when
// they end, and the prefetch's load of the row's start only put a round trip before the first tile: 2-3% of a
// batch-32 step without it, 2% of a 12- or 16-row fused step with it (docs/benchmarks.md).
constexpr int64_t kWarmCacheMaxRows = 16;

template <int kHead, bool kRows16>
void launch(const CacheDecodeArgs& a, float scale_log2, bool dependent) {
  const auto go = [&](auto kernel) {
    launch_dependent(kernel, dim3(static_cast<unsigned>(a.B * a.KV)), dim3(kWarps * 32), 0, rc::current_stream(),
                     dependent, a, scale_log2);
  };
  if (a.B * a.Tn <= kWarmCacheMaxRows)
    go(&cache_decode_kernel<kHead, kRows16, kHead == 64, true>);
  else
    go(&cache_decode_kernel<kHead, kRows16, kHead == 64, false>);
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
