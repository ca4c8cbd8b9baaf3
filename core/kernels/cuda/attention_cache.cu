// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Attention over a key/value cache, the inner loop of generation. One of two kernels attends:
//
// Decode (few new queries per row): one block per (row, head, new query), which also appends the new positions to
// the cache in the same launch (one kernel per layer and step, not two): a key at or past the row's start is read
// straight from the new k / v rows instead of the cache, so no block waits for another's write, and the block of
// the first query head of each key/value head writes its query's position into the cache for the next steps. Decoding
// reads every cached key and value once per step and does little arithmetic with them, so the kernel is a streaming
// read tuned for memory parallelism: the lanes of a warp form groups of G lanes, a group reads one key (each lane a
// 16-byte vector of it) and its value, the block's groups take consecutive keys so that a block iteration reads one
// contiguous stretch of the cache, and every group unrolls four keys so that eight rows are in flight per group before
// any reduction (kept in the storage dtype until used, so that bf16 rows cost half the registers of floats). A group's
// dot product is a G-lane shuffle reduction; each group keeps a running max, sum and output (online softmax), so the
// keys are read once; groups are merged by shuffles, warps through shared memory.
//
// Prefill (many new queries per row): the new keys and values are first copied into the cache (append_kernel);
// then one block per (row, head, tile of queries) attends. Key and value tiles are staged in shared memory once per
// query tile instead of once per query; lane j of a warp scores key j of the tile against one query, and the lanes
// then own head dimensions for the weighted sum of values.
//
// Grouped-query heads: query head h reads key/value head h / group of the cache [B, KV, cap, D]. q, k and v are read
// through row strides, so the packed [B, Tn, 3C] projections of GPT are the case group = 1 with stride 3C.
//
// Scores, sums and outputs are f32 whatever the storage dtype.
//
// bf16 decode steps at head size 64 or 128 go to the tensor-core kernel of attention_cache_mma.cu instead, one block
// per row and key/value head, when there are enough such blocks to fill the GPU (take_tensor_core_decode).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/kernels/backends.h"
#include "core/kernels/cuda/attention_cache_mma.h"
#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

// The new keys and values (KV heads, rows kv_stride apart) into the cache [B, KV, cap, D].
template <typename T>
__global__ void append_kernel(const T* k_new, const T* v_new, int64_t kv_stride, const int32_t* starts, T* k_cache,
                              T* v_cache, int64_t B, int64_t Tn, int64_t KV, int64_t D, int64_t cap) {
  const int64_t width = KV * D, n = B * Tn * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % width, bt = i / width, b = bt / Tn, t = bt % Tn;
    const int64_t pos = starts[b] + t;
    if (pos >= cap) continue;  // a finished row's padding past the end of its cache
    const int64_t h = c / D, d = c % D;
    const int64_t slot = ((b * KV + h) * cap + pos) * D + d;
    k_cache[slot] = k_new[bt * kv_stride + c];
    v_cache[slot] = v_new[bt * kv_stride + c];
  }
}

// Where the new queries are and how query heads map onto the cache's key/value heads.
struct Queries {
  int64_t stride;  // between consecutive positions of q
  int64_t H;       // query heads
  int64_t group;   // query heads per key/value head
};

// kVec consecutive elements as floats; p aligned to kVec * sizeof(T) bytes.
template <int kVec, typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[kVec]) {
  if constexpr (kVec * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = to_f32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = to_f32(p[i]);
  }
}

// kVec consecutive elements kept in their storage dtype (one 16-byte load when they fill 16 bytes), read as floats.
template <typename T, int kVec>
struct VecOf {
  alignas(kVec * sizeof(T) == 16 ? 16 : alignof(T)) T e[kVec];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kVec * sizeof(T) == 16) {
      *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) e[i] = p[i];
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kVec; ++i) e[i] = from_f32<T>(0.f);
  }
  __device__ __forceinline__ float at(int i) const {
    return to_f32(e[i]);
  }
};

// An online-softmax state (max m, sum l, weighted value sum acc) absorbs another one.
template <int kN>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[kN], float m_o, float l_o,
                                            const float (&acc_o)[kN]) {
  const float m_new = fmaxf(m, m_o);
  // An empty state has m = -inf, l = 0, acc = 0; two empty states stay empty (and no -inf - -inf appears).
  const float a = m == -INFINITY ? 0.f : __expf(m - m_new);
  const float b = m_o == -INFINITY ? 0.f : __expf(m_o - m_new);
  l = l * a + l_o * b;
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = acc[i] * a + acc_o[i] * b;
  m = m_new;
}

// Warps of a decode block: 8, or 16 when the launch has fewer blocks than the GPU has SMs (a decode step of one or a
// few sequences: twice the keys in flight per block halves the iterations each block walks through, on SMs that would
// otherwise stay idle).
constexpr int kDecodeWarpsNarrow = 8;
constexpr int kDecodeWarpsWide = 16;
constexpr int kUnroll = 4;  // keys per group per iteration

// kVec elements per vector, kG lanes per key (a power of two), kChunks vectors per lane: lane g of a group holds
// elements (i * kG + g) * kVec .. + kVec - 1 for i < kChunks, those below D.
template <typename T, int kDecodeWarps, int kVec, int kG, int kChunks>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    decode_kernel(const T* q_new, Queries qs, const T* k_new, const T* v_new, int64_t kv_stride, const int32_t* starts,
                  T* k_cache, T* v_cache, T* out, int64_t Tn, int64_t D, int64_t cap, float scale) {
  constexpr int kPerLane = kVec * kChunks, kHead = kG * kPerLane, kGroups = 32 / kG;
  constexpr int kBlockKeys = kDecodeWarps * kGroups;
  __shared__ float warp_m[kDecodeWarps], warp_l[kDecodeWarps];
  __shared__ float warp_acc[kDecodeWarps][kHead];
  // A decode product launched after this kernel as its programmatic dependent may start now and prefetch its weights
  // while the attention runs on a few SMs (dependent_launch.cuh); it waits for this kernel before reading anything.
  allow_dependents();

  // 32-bit index math (the grid is B H Tn < 2^31 blocks): a 64-bit division costs ~70 instructions, a sizeable
  // share of a block that reads a few hundred keys.
  const int H = static_cast<int>(qs.H), group = static_cast<int>(qs.group), tn = static_cast<int>(Tn);
  const int block = static_cast<int>(blockIdx.x), bh = block / tn, t = block - bh * tn, b = bh / H, h = bh - b * H;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane % kG;
  const int slot = warp * kGroups + lane / kG;  // this group's key within a block iteration
  const int kv_heads = H / group, kv_local = h / group;
  const int64_t kv_head = static_cast<int64_t>(b) * kv_heads + kv_local;
  const T* keys = k_cache + kv_head * cap * D;
  const T* values = v_cache + kv_head * cap * D;
  // Launched as the programmatic dependent of the q|k|v product, the block starts while that product runs: it moves
  // this key/value head's cached rows towards L2 (the first query head of each group, one thread per 32 KiB), then
  // waits for the product before it reads anything. The row count read here only sizes the prefetch (clamped to
  // the cache, which a prefetch never leaves); the one the attention uses is read after the wait.
  if (h % group == 0 && t == 0 && (D * static_cast<int64_t>(sizeof(T))) % 16 == 0) {
    const int64_t cached = min(max(static_cast<int64_t>(starts[b]), int64_t{0}), cap);
    prefetch_pair_l2(keys, values, cached * D * static_cast<int64_t>(sizeof(T)));
  }
  wait_for_prerequisites();
  const int64_t start = starts[b];
  const int64_t seen = min(start + t + 1, cap);
  // The new positions of this row and key/value head: position start + i is row i of these.
  const T* new_keys = k_new + b * Tn * kv_stride + kv_local * D;
  const T* new_values = v_new + b * Tn * kv_stride + kv_local * D;

  // The append: one block per key/value head and new position writes it (positions past the cache are dropped).
  // Nothing in this launch reads it from the cache.
  if (h % group == 0 && start + t < cap) {
    T* k_slot = k_cache + (kv_head * cap + start + t) * D;
    T* v_slot = v_cache + (kv_head * cap + start + t) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      k_slot[d] = new_keys[t * kv_stride + d];
      v_slot[d] = new_values[t * kv_stride + d];
    }
  }

  bool owned[kChunks];
  float q[kChunks][kVec];
  const T* q_row = q_new + (b * Tn + t) * qs.stride + h * D;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int64_t d = static_cast<int64_t>(i * kG + g) * kVec;
    owned[i] = d < D;
    if (owned[i]) {
      load_vec<kVec>(q_row + d, q[i]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) q[i][e] *= scale;
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) q[i][e] = 0.f;
    }
  }

  float m = -INFINITY, l = 0.f, acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.f;

  // The trip count depends on `seen` alone, so every lane runs every shuffle.
  for (int64_t base = 0; base < seen; base += kUnroll * kBlockKeys) {
    // The keys and values stay in their storage dtype until used: half the registers of floats for bf16, so twice
    // the keys are in flight at the same occupancy.
    VecOf<T, kVec> k[kUnroll][kChunks], v[kUnroll][kChunks];
    bool live[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * kBlockKeys + slot;
      live[u] = j < seen;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        if (live[u] && owned[i]) {
          const int64_t d = static_cast<int64_t>(i * kG + g) * kVec;
          if (j < start) {
            k[u][i].load(keys + j * D + d);
            v[u][i].load(values + j * D + d);
          } else {
            k[u][i].load(new_keys + (j - start) * kv_stride + d);
            v[u][i].load(new_values + (j - start) * kv_stride + d);
          }
        } else {
          k[u][i].zero();
          v[u][i].zero();
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot += q[i][e] * k[u][i].at(e);
#pragma unroll
      for (int o = kG / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (!live[u]) continue;
      const float m_new = fmaxf(m, dot);
      const float rescale = __expf(m - m_new);  // 0 at the first key (m = -inf, dot finite)
      const float p = __expf(dot - m_new);
      l = l * rescale + p;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[i * kVec + e] = acc[i * kVec + e] * rescale + p * v[u][i].at(e);
      m = m_new;
    }
  }

  // Merge the groups of the warp: lanes that hold the same head elements are kG, 2 kG, ... apart.
#pragma unroll
  for (int o = kG; o < 32; o <<= 1) {
    float acc_o[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc_o[i] = __shfl_xor_sync(0xffffffffu, acc[i], o);
    const float m_o = __shfl_xor_sync(0xffffffffu, m, o), l_o = __shfl_xor_sync(0xffffffffu, l, o);
    merge_state(m, l, acc, m_o, l_o, acc_o);
  }
  if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
  if (lane < kG) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
#pragma unroll
      for (int e = 0; e < kVec; ++e) warp_acc[warp][(i * kG + g) * kVec + e] = acc[i * kVec + e];
  }
  __syncthreads();

  // Merge the warps: each thread finishes some output elements.
  float top = -INFINITY;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) top = fmaxf(top, warp_m[w]);
  float factor[kDecodeWarps], total = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    factor[w] = warp_m[w] == -INFINITY ? 0.f : __expf(warp_m[w] - top);
    total += warp_l[w] * factor[w];
  }
  const float inv = 1.f / total;  // key 0 is always seen, so total >= 1
  T* out_row = out + (b * Tn + t) * H * D + h * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) sum += warp_acc[w][d] * factor[w];
    out_row[d] = from_f32<T>(sum * inv);
  }
}

constexpr int kPrefillWarps = 4;
constexpr int kQueriesPerWarp = 4;
constexpr int kQueryTile = kPrefillWarps * kQueriesPerWarp;
constexpr int kKeyTile = 32;  // one key per lane
constexpr int kPrefillMaxHead = 128;

// kDims = ceil(D / 32): head elements per lane in the weighted sum (lane owns d = lane + 32 i).
template <typename T, int kDims>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    prefill_kernel(const T* q_new, Queries qs, const int32_t* starts, const T* k_cache, const T* v_cache, T* out,
                   int64_t Tn, int64_t D, int64_t cap, float scale) {
  extern __shared__ float shared[];
  // Keys padded to D + 1 floats: lane j reads key j's element d, and the odd stride puts the 32 lanes in 32 banks.
  const int64_t key_stride = D + 1;
  float* s_q = shared;                       // [kQueryTile][D], scaled
  float* s_k = s_q + kQueryTile * D;         // [kKeyTile][D + 1]
  float* s_v = s_k + kKeyTile * key_stride;  // [kKeyTile][D]

  const int64_t tiles = (Tn + kQueryTile - 1) / kQueryTile;
  const int64_t H = qs.H, tile = blockIdx.x % tiles, bh = blockIdx.x / tiles, h = bh % H, b = bh / H;
  const int64_t t0 = tile * kQueryTile, t_end = min(t0 + kQueryTile, Tn);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t start = starts[b];
  const int64_t block_seen = min(start + t_end, cap);  // keys the tile's last query sees
  const int64_t kv_head = b * (H / qs.group) + h / qs.group;
  const T* keys = k_cache + kv_head * cap * D;
  const T* values = v_cache + kv_head * cap * D;

  for (int64_t i = threadIdx.x; i < kQueryTile * D; i += blockDim.x) {
    const int64_t tq = t0 + i / D, d = i % D;
    s_q[i] = tq < Tn ? to_f32(q_new[(b * Tn + tq) * qs.stride + h * D + d]) * scale : 0.f;
  }

  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kDims];
#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[r][i] = 0.f;
  }

  for (int64_t k0 = 0; k0 < block_seen; k0 += kKeyTile) {
    const int64_t n_keys = min(static_cast<int64_t>(kKeyTile), block_seen - k0);
    __syncthreads();  // the previous tile is no longer read (and s_q is written, the first time)
    for (int64_t i = threadIdx.x; i < n_keys * D; i += blockDim.x) {
      const int64_t j = i / D, d = i % D;
      s_k[j * key_stride + d] = to_f32(keys[(k0 + j) * D + d]);
      s_v[j * D + d] = to_f32(values[(k0 + j) * D + d]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kQueriesPerWarp; ++r) {
      const int64_t row = warp * kQueriesPerWarp + r, tq = t0 + row;
      if (tq >= Tn) break;  // warp-uniform
      const int64_t seen = min(start + tq + 1, cap);
      const int64_t j = k0 + lane;
      float score = -INFINITY;
      if (lane < n_keys && j < seen) {
        const float* qr = s_q + row * D;
        const float* kr = s_k + lane * key_stride;
        score = 0.f;
        for (int64_t d = 0; d < D; ++d) score += qr[d] * kr[d];
      }
      const float tile_max = warp_max(score);
      if (tile_max == -INFINITY) continue;  // this query sees none of the tile's keys (warp-uniform)
      const float m_new = fmaxf(m[r], tile_max);
      const float rescale = __expf(m[r] - m_new);
      const float p = score == -INFINITY ? 0.f : __expf(score - m_new);
      l[r] = l[r] * rescale + warp_sum(p);
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] *= rescale;
      for (int jj = 0; jj < n_keys; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int i = 0; i < kDims; ++i) {
          const int64_t d = lane + 32 * i;
          if (d < D) acc[r][i] += pj * s_v[jj * D + d];
        }
      }
      m[r] = m_new;
    }
  }

#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    const int64_t tq = t0 + warp * kQueriesPerWarp + r;
    if (tq >= Tn) break;
    T* out_row = out + (b * Tn + tq) * H * D + h * D;
    const float inv = 1.f / l[r];  // key 0 is always seen
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) out_row[d] = from_f32<T>(acc[r][i] * inv);
    }
  }
}

int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// Queries per row at or below which the decode kernel is used: it reads the keys once per query, the prefill
// kernel once per tile of kQueryTile queries, but stages them through shared memory first.
constexpr int64_t kDecodeMaxQueries = 4;
constexpr int64_t kMaxHead = 256;

template <typename T>
void launch_decode(const T* q, Queries qs, const T* k_new, const T* v_new, int64_t kv_stride, const int32_t* starts,
                   T* k, T* v, T* out, int64_t B, int64_t Tn, int64_t D, int64_t cap, float scale) {
  const unsigned blocks = static_cast<unsigned>(B * qs.H * Tn);
  const bool wide = static_cast<int64_t>(blocks) < sm_count();
  // The switch of the decode kernels (decode_kernels.h) covers this launch too.
  const bool dependent = decode_dependent_launch_enabled() && dependent_launch_supported();
  const auto run = [&](auto vec, auto groups, auto chunks) {
    const auto launch = [&](auto warps) {
      constexpr int kWarps = decltype(warps)::value;
      launch_dependent(
          &decode_kernel<T, kWarps, decltype(vec)::value, decltype(groups)::value, decltype(chunks)::value>,
          dim3(blocks), dim3(kWarps * 32), 0, rc::current_stream(), dependent, q, qs, k_new, v_new, kv_stride, starts,
          k, v, out, Tn, D, cap, scale);
    };
    if (wide)
      launch(std::integral_constant<int, kDecodeWarpsWide>{});
    else
      launch(std::integral_constant<int, kDecodeWarpsNarrow>{});
  };
  using I = std::integral_constant<int, 1>;
  constexpr int kVec = 16 / sizeof(T);
  using V = std::integral_constant<int, kVec>;
  const bool aligned = aligned16(q) && aligned16(k) && aligned16(v) && aligned16(k_new) && aligned16(v_new) &&
                       qs.stride % kVec == 0 && kv_stride % kVec == 0;
  if (aligned && D % kVec == 0 && D <= 32 * kVec) {
    // 16-byte vectors: a group of D / kVec lanes (rounded up to a power of two) per key.
    switch (next_pow2(D / kVec)) {
      case 1:
        return run(V{}, I{}, I{});
      case 2:
        return run(V{}, std::integral_constant<int, 2>{}, I{});
      case 4:
        return run(V{}, std::integral_constant<int, 4>{}, I{});
      case 8:
        return run(V{}, std::integral_constant<int, 8>{}, I{});
      case 16:
        return run(V{}, std::integral_constant<int, 16>{}, I{});
      default:
        return run(V{}, std::integral_constant<int, 32>{}, I{});
    }
  }
  // Any other head: scalar elements, a whole warp per key, up to 8 elements per lane.
  using W = std::integral_constant<int, 32>;
  switch (next_pow2((D + 31) / 32)) {
    case 1:
      return run(I{}, W{}, I{});
    case 2:
      return run(I{}, W{}, std::integral_constant<int, 2>{});
    case 4:
      return run(I{}, W{}, std::integral_constant<int, 4>{});
    default:
      return run(I{}, W{}, std::integral_constant<int, 8>{});
  }
}

template <typename T>
void launch_prefill(const T* q, Queries qs, const int32_t* starts, const T* k, const T* v, T* out, int64_t B,
                    int64_t Tn, int64_t D, int64_t cap, float scale) {
  const int64_t tiles = (Tn + kQueryTile - 1) / kQueryTile;
  const unsigned blocks = static_cast<unsigned>(B * qs.H * tiles);
  const size_t shared = sizeof(float) * static_cast<size_t>(kQueryTile * D + kKeyTile * (D + 1) + kKeyTile * D);
  const auto run = [&](auto dims) {
    prefill_kernel<T, decltype(dims)::value>
        <<<blocks, kPrefillWarps * 32, shared, rc::current_stream()>>>(q, qs, starts, k, v, out, Tn, D, cap, scale);
  };
  if (D <= 32) return run(std::integral_constant<int, 1>{});
  if (D <= 64) return run(std::integral_constant<int, 2>{});
  return run(std::integral_constant<int, 4>{});
}

// Which decode kernel attends a bf16 step: RETORT_DECODE_ATTENTION=mma takes the tensor-core kernel wherever it
// fits, =lanes the CUDA-core one; otherwise the tensor-core kernel where it fits and has a block for every
// multiprocessor. Read on every call, so a benchmark or a test can switch between launches.
bool take_tensor_core_decode(const CacheDecodeArgs& args) {
  if (!cache_decode_mma_fits(args)) return false;
  const char* choice = std::getenv("RETORT_DECODE_ATTENTION");
  if (choice != nullptr && std::strcmp(choice, "lanes") == 0) return false;
  if (choice != nullptr && std::strcmp(choice, "mma") == 0) return true;
  return cache_decode_mma_enough_blocks(args);
}

// q [B, Tn, H * D] (rows q_stride apart), the new k and v [B, Tn, KV * D] (rows kv_stride apart): append, then
// attend.
void with_cache(const void* q, int64_t q_stride, const void* k_new, const void* v_new, int64_t kv_stride, DType dtype,
                const Tensor& starts, int64_t B, int64_t Tn, int64_t H, int64_t KV, int64_t D, Tensor& k_cache,
                Tensor& v_cache, Tensor& out) {
  const int64_t cap = k_cache.size(2);
  if (D > kMaxHead) fail_input("attention_with_cache (CUDA): head dimension {} is above the kernels' {}", D, kMaxHead);
  if (B * Tn == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const Queries qs{q_stride, H, H / KV};
  dispatch_float(dtype, "attention_with_cache", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* qt = static_cast<const T*>(q);
    const auto* kt = static_cast<const T*>(k_new);
    const auto* vt = static_cast<const T*>(v_new);
    if (Tn <= kDecodeMaxQueries || D > kPrefillMaxHead) {
      // The decode kernels append the new positions themselves.
      if constexpr (std::is_same_v<T, bf16>) {
        const CacheDecodeArgs args{qt,
                                   q_stride,
                                   kt,
                                   vt,
                                   kv_stride,
                                   starts.data<int32_t>(),
                                   k_cache.data<T>(),
                                   v_cache.data<T>(),
                                   out.data<T>(),
                                   B,
                                   Tn,
                                   H,
                                   KV,
                                   D,
                                   cap};
        if (Tn <= kDecodeMaxQueries && take_tensor_core_decode(args)) {
          cache_decode_mma(args, decode_dependent_launch_enabled() && dependent_launch_supported());
          return;
        }
      }
      launch_decode<T>(qt, qs, kt, vt, kv_stride, starts.data<int32_t>(), k_cache.data<T>(), v_cache.data<T>(),
                       out.data<T>(), B, Tn, D, cap, scale);
    } else {
      const int threads = 256;
      append_kernel<T><<<grid_for(B * Tn * KV * D, threads), threads, 0, rc::current_stream()>>>(
          kt, vt, kv_stride, starts.data<int32_t>(), k_cache.data<T>(), v_cache.data<T>(), B, Tn, KV, D, cap);
      RETORT_CUDA_CHECK_LAUNCH();
      launch_prefill<T>(qt, qs, starts.data<int32_t>(), k_cache.data<T>(), v_cache.data<T>(), out.data<T>(), B, Tn, D,
                        cap, scale);
    }
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void attention_with_cache(const Tensor& qkv, const Tensor& starts, int n_head, Tensor& k_cache, Tensor& v_cache,
                          Tensor& out) {
  rc::DeviceGuard guard(device_of(qkv, "attention_with_cache"));
  const int64_t C = qkv.size(2) / 3, H = n_head, D = C / n_head;
  const auto* base = static_cast<const char*>(qkv.raw_data());
  const size_t cs = dtype_size(qkv.dtype());
  with_cache(base, 3 * C, base + C * cs, base + 2 * C * cs, 3 * C, qkv.dtype(), starts, qkv.size(0), qkv.size(1), H, H,
             D, k_cache, v_cache, out);
}

void attention_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& starts, int n_head,
                          int n_kv_head, Tensor& k_cache, Tensor& v_cache, Tensor& out) {
  rc::DeviceGuard guard(device_of(q, "attention_with_cache"));
  check(k.size(2) == v.size(2), "attention_with_cache (CUDA): k {} and v {} differ", k.describe(), v.describe());
  with_cache(q.raw_data(), q.size(2), k.raw_data(), v.raw_data(), k.size(2), q.dtype(), starts, q.size(0), q.size(1),
             n_head, n_kv_head, q.size(2) / n_head, k_cache, v_cache, out);
}

}  // namespace retort::kernels::cuda
