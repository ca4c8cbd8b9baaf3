// The small-m linear on the tensor cores: out [M, N] = epilogue(norm(x) [M, K] W^T + bias) for 5..32 bf16 rows (a
// decode step of a batch of sequences; RETORT_DECODE_MMA_MIN_ROWS moves the lower end), one launch.
//
// Past a few rows the CUDA-core kernel (small_m_linear.cu) spends more time on multiply-adds than on reading the
// weight; cuBLAS's tiles are sized for larger products and leave the norm before and the epilogue after to other
// launches. Here the weight is still read once, at memory bandwidth, and the products run as mma.sync m16n8k16:
//   - the weight is the A operand (16 output features a product) and the rows are B (8 rows a product, up to 4 of
//     them), so one 16-byte load per lane of the weight feeds M / 8 products;
//   - a lane loads 8 consecutive values of a weight row (16 bytes) and of an input row. A product sums over k, so any
//     order of k is the same sum as long as A and B agree on it: lane l's 8 values at k = 8 (l % 4) .. + 7 of a
//     32-wide block stand for the fragment's k = 2 (l % 4) + {0, 1} and 2 (l % 4) + {8, 9} of two m16n8k16 products,
//     for the weight and the rows alike. No ldmatrix, no shuffles;
//   - the input rows are copied into shared memory with cp.async, once per block, and normed there, 8 threads a row
//     (float32 statistics, rounded to bf16 as a norm kernel stores them), with a row pitch of 64 bytes mod 128, so the
//     8 lanes of a 16-byte phase read 8 different bank groups. Rows that do not fit shared memory whole are staged in
//     chunks of K, per tile, with their statistics computed from global memory first;
//   - a block of 8 warps owns 16 * 8 / split output features; `split` warps share a group of 16 features, each taking
//     every split-th 32-wide block of k, with two passes of weight loads in flight. Their float32 sums meet in shared
//     memory, are added in a fixed order (deterministic, no atomics) and finished (bias, GELU, SwiGLU or residual,
//     one rounding, the operands staged per tile by cp.async) with the rows of one output row spread over
//     consecutive threads;
//   - the weights and the norm's parameters do not depend on the kernel before: under programmatic dependent launch
//     a block prefetches its tiles' weights into L2, stages the norm's parameters and loads its first pass of weights
//     into registers before it waits.
// Measured (docs/benchmarks.md): faster than cuBLAS plus a norm kernel up to 16 rows; at 32 rows every block's
// staging and norm of all the rows costs more than cuBLAS's products, so the models stop at 16 by default.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include <algorithm>
#include <cstdlib>

#include "core/kernels/cuda/ptx.cuh"
#include "core/kernels/cuda/small_m_linear_parts.cuh"

namespace retort::kernels::cuda::small_m {
namespace {
using namespace ptx;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStatsRows = 32;  // the rows whose norm statistics shared memory holds (kMmaMaxRows)

// The shape of one launch, found on the host.
struct MmaShape {
  int64_t chunk;  // values of k staged at a time (a multiple of 32; K when the rows fit whole)
  int64_t pitch;  // of a staged row, in values
  int rows_per_tile;
  int64_t tiles;
  bool operands_staged;  // the epilogue operands go through shared memory (16-byte copies: N a multiple of 8)
};

// The two products of one 32-wide block of k: weight rows g and g + 8 (w_lo, w_hi), input rows (x), 8 values each.
__device__ __forceinline__ void mma_block(float (&c)[4], const uint4& w_lo, const uint4& w_hi, const uint4& x) {
  mma(c, {w_lo.x, w_hi.x, w_lo.y, w_hi.y}, x.x, x.y);
  mma(c, {w_lo.z, w_hi.z, w_lo.w, w_hi.w}, x.z, x.w);
}

__device__ __forceinline__ uint4 load_weight(const bf16* p, bool live) {
  return live ? __ldcs(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

template <typename NW>
__device__ __forceinline__ void load_norm8(const void* p, int64_t k, float (&v)[8]) {
  load8(static_cast<const NW*>(p) + k, v);
}

// One row's norm statistics, read by `lanes` cooperating lanes of a warp (this one from pack `first`, every `lanes`-th
// 8-value pack; a lane with packs 0 only joins the reductions) and reduced by `reduce`: the mean (0 for RMSNorm),
// then 1 / rms of the second moment about it, as the norm kernels compute them. kLoads: packs a lane has in flight
// (several from global memory; one from shared memory, where registers are scarcer than latency).
template <int kLoads, typename Reduce>
__device__ __forceinline__ float2 row_moments(const Params& p, const bf16* row, int64_t first, int64_t lanes,
                                              int64_t packs, Reduce&& reduce) {
  const float inv_k = 1.f / static_cast<float>(p.K);
  const auto over_row = [&](auto&& f) {
    float total = 0.f;
#pragma unroll kLoads
    for (int64_t q = first; q < packs; q += lanes) {
      float v[8];
      load8(row + 8 * q, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) total += f(v[e]);
    }
    return reduce(total);
  };
  const float mu = p.norm == kNormLayer ? over_row([](float v) { return v; }) * inv_k : 0.f;
  const float rs = 1.f / sqrtf(over_row([mu](float v) { return (v - mu) * (v - mu); }) * inv_k + p.eps);
  return make_float2(mu, rs);
}

// Each row's norm statistics (row_moments), one warp a row; `row(m)` is the row, in shared or global memory.
template <typename Row>
__device__ void row_statistics(const Params& p, Row&& row, float* mean, float* rstd) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t m = warp; m < p.rows; m += kWarps) {
    const float2 moments = row_moments<4>(p, row(m), lane, 32, p.K / 8, [](float v) { return warp_sum(v); });
    if (lane == 0) {
      mean[m] = moments.x;
      rstd[m] = moments.y;
    }
  }
}

// The norm of the whole staged rows in place, 8 threads a row (consecutive lanes of one warp, so the statistics are
// 3-step shuffle reductions and every row is done at once): the mean, then the second moment about it, as the norm
// kernels compute them; the norm's parameters were staged in shared memory too.
template <typename NW>
__device__ void norm_staged_rows(const Params& p, bf16* rows_s, int64_t pitch, const NW* nw_s, const NW* nb_s) {
  constexpr int kLanes = kThreads / kStatsRows;
  const int m = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const bool live = m < p.rows;
  const int64_t packs = p.K / 8;
  bf16* row = rows_s + m * pitch;
  const auto group_sum = [](float v) {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  };
  const float2 moments = row_moments<1>(p, row, sub, kLanes, live ? packs : 0, group_sum);
  const float mu = moments.x, rs = moments.y;
  for (int64_t q = sub; live && q < packs; q += kLanes) {
    float v[8], w[8], b[8] = {};
    load8(row + 8 * q, v);
    load8(nw_s + 8 * q, w);
    if (p.norm_b) load8(nb_s + 8 * q, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (v[e] - mu) * rs * w[e] + b[e];
    store8(row + 8 * q, v);
  }
}

// Values [first, first + count) of every input row into shared memory, normed and rounded to bf16 where the linear
// has a norm: every 16-byte copy is issued at once (cp.async), then the block norms the staged values in place (the
// whole rows: norm_staged_rows; a chunk: with the statistics computed from global memory before). Ends with the rows
// ready for every warp.
template <typename NW>
__device__ void stage_chunk(const Params& p, bf16* rows_s, int64_t pitch, int64_t first, int64_t count,
                            const float* mean, const float* rstd, const NW* nw_s, const NW* nb_s) {
  const bf16* x = static_cast<const bf16*>(p.x);
  const int packs = static_cast<int>(count / 8);  // 32-bit index math: a 64-bit division costs ~70 instructions
  for (int i = threadIdx.x; i < static_cast<int>(p.rows) * packs; i += kThreads) {
    const int m = i / packs, q = i % packs;
    cp_async16(smem_addr(rows_s + m * pitch + 8 * q), x + m * p.K + first + 8 * q, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (p.norm == kNormNone) return;
  if (count == p.K) {
    norm_staged_rows<NW>(p, rows_s, pitch, nw_s, nb_s);
  } else {
    for (int i = threadIdx.x; i < static_cast<int>(p.rows) * packs; i += kThreads) {
      const int m = i / packs, q = i % packs;
      const int64_t k = first + 8 * q;
      float v[8], w[8], b[8] = {};
      load8(rows_s + m * pitch + 8 * q, v);
      load_norm8<NW>(p.norm_w, k, w);
      if (p.norm_b) load_norm8<NW>(p.norm_b, k, b);
      const float mu = mean[m], rs = rstd[m];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = (v[e] - mu) * rs * w[e] + b[e];
      store8(rows_s + m * pitch + 8 * q, v);
    }
  }
  __syncthreads();
}

// The norm's weight and bias into shared memory (constants of the model: copied before the wait for the kernel before).
template <typename NW>
__device__ void stage_norm_parameters(const Params& p, NW* nw_s, NW* nb_s) {
  const int64_t packs = p.K * static_cast<int64_t>(sizeof(NW)) / 16;
  constexpr int kPer = 16 / sizeof(NW);
  for (int64_t i = threadIdx.x; i < packs; i += kThreads) {
    cp_async16(smem_addr(nw_s + kPer * i), static_cast<const NW*>(p.norm_w) + kPer * i, true);
    if (p.norm_b) cp_async16(smem_addr(nb_s + kPer * i), static_cast<const NW*>(p.norm_b) + kPer * i, true);
  }
  cp_async_commit();
}

// The epilogue operands of one tile (bias, bias2, the residual's [rows, tile] block) copied into shared memory while
// the tile's products run: 16-byte copies, which need every row of the residual to start on 16 bytes (N a multiple
// of 8); otherwise the epilogue loads them itself.
struct TileOperands {
  bf16* bias;      // [kMaxTile]
  bf16* bias2;     // [kMaxTile]
  bf16* residual;  // [rows][kMaxTile]
};
constexpr int kMaxTile = 16 * kWarps;

__device__ void stage_operands(const Params& p, const TileOperands& t, int64_t n0, int per_tile) {
  const int packs = per_tile / 8;
  const auto copy = [&](bf16* dst, const void* src, int64_t row, int q) {
    const int64_t n = n0 + 8 * q;
    cp_async16(smem_addr(dst + 8 * q), static_cast<const bf16*>(src) + row * p.N + (n < p.N ? n : 0), n < p.N);
  };
  for (int i = threadIdx.x; i < packs; i += kThreads) {
    if (p.bias) copy(t.bias, p.bias, 0, i);
    if (p.bias2) copy(t.bias2, p.bias2, 0, i);
  }
  if (p.residual)
    for (int i = threadIdx.x; i < p.rows * packs; i += kThreads)
      copy(t.residual + (i / packs) * kMaxTile, p.residual, i / packs, i % packs);
  cp_async_commit();
}

// One pass of weights in registers: kUnroll 32-wide blocks of k (every split-th from b0) of weight rows g and g + 8
// (and of weight2, `second` values further on), and their products with the staged rows.
template <int kUnroll, bool kDual>
struct WeightPass {
  uint4 lo[kUnroll], hi[kUnroll], lo2[kDual ? kUnroll : 1], hi2[kDual ? kUnroll : 1];

  __device__ __forceinline__ void load(const bf16* w_lo, const bf16* w_hi, bool live_lo, bool live_hi, int64_t b0,
                                       int split, int64_t blocks, ptrdiff_t second) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + u * split;
      const bool in = b < blocks;
      lo[u] = load_weight(w_lo + 32 * b, in && live_lo);
      hi[u] = load_weight(w_hi + 32 * b, in && live_hi);
      if constexpr (kDual) {
        lo2[u] = load_weight(w_lo + second + 32 * b, in && live_lo);
        hi2[u] = load_weight(w_hi + second + 32 * b, in && live_hi);
      }
    }
  }

  template <int kNT>
  __device__ __forceinline__ void products(float (&acc)[kNT][4], float (&acc2)[kDual ? kNT : 1][4], const bf16* x_s,
                                           int64_t pitch, int64_t b0, int split, int64_t blocks) const {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + u * split;
      if (b >= blocks) break;
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x_s + 8 * j * pitch + 32 * b);
        mma_block(acc[j], lo[u], hi[u], xv);
        if constexpr (kDual) mma_block(acc2[j], lo2[u], hi2[u], xv);
      }
    }
  }
};

// kNT: products of 8 rows (M <= 8 kNT); kDual: a second weight (SwiGLU); NW: the storage of the norm's parameters.
template <int kNT, bool kDual, typename NW>
__global__ void __launch_bounds__(kThreads, 2) mma_kernel(Params p, MmaShape s) {
  constexpr int kRows = 8 * kNT;          // staged rows, the last ones zero
  constexpr int kPartial = kRows + 1;     // pitch of a partial-sum row (odd: spreads a column's banks)
  constexpr int kUnroll = kDual ? 2 : 4;  // 32-wide blocks of k a pass loads (two passes in flight)
  extern __shared__ float4 shared_words[];
  float* mean = reinterpret_cast<float*>(shared_words);
  float* rstd = mean + kStatsRows;
  float* partial = rstd + kStatsRows;                  // [kWarps][16][kPartial]
  float* partial2 = partial + kWarps * 16 * kPartial;  // the same for weight2
  bf16* operands = reinterpret_cast<bf16*>(partial2 + (kDual ? kWarps * 16 * kPartial : 0));
  const TileOperands tile_ops{operands, operands + kMaxTile, operands + 2 * kMaxTile};
  bf16* rows_s = operands + (2 + kRows) * kMaxTile;
  NW* nw_s = reinterpret_cast<NW*>(rows_s + kRows * s.pitch);  // [K] each, when the rows are staged whole with a norm
  NW* nb_s = nw_s + p.K;

  allow_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int split = p.split, group = warp / split, slice = warp % split;
  const int g = lane / 4, quad = lane % 4;
  const bf16* weight = static_cast<const bf16*>(p.weight);
  const bf16* weight2 = static_cast<const bf16*>(p.weight2);
  if (threadIdx.x == 0) {
    prefetch_tile<bf16, true, kDual>(p, blockIdx.x, s.rows_per_tile);
    if (s.tiles > gridDim.x) prefetch_tile<bf16, true, kDual>(p, blockIdx.x + gridDim.x, s.rows_per_tile);
  }
  const bool whole = s.chunk >= p.K;
  if (whole && p.norm != kNormNone) stage_norm_parameters<NW>(p, nw_s, nb_s);
  // The padding rows stay zero (their sums are never stored; zero keeps them finite).
  for (int64_t i = threadIdx.x; i < (kRows - p.rows) * s.pitch; i += kThreads) rows_s[p.rows * s.pitch + i] = bf16(0.f);

  const auto rows_of = [&](int64_t tile) { return tile * s.rows_per_tile + group * 16 + g; };
  // Two passes of weights in registers: while one pass's products run, the next pass's loads are in flight.
  WeightPass<kUnroll, kDual> pass_a, pass_b;
  // The weights do not depend on the kernels before: the first tile's first pass is loaded before the wait.
  {
    const int64_t n_lo = rows_of(blockIdx.x);
    pass_a.load(weight + n_lo * p.K + 8 * quad, weight + (n_lo + 8) * p.K + 8 * quad, n_lo < p.N, n_lo + 8 < p.N, slice,
                split, std::min(s.chunk, p.K) / 32, weight2 - weight);
  }

  wait_for_prerequisites();  // the input rows (and the residual) come from the kernels before
  if (whole) {
    stage_chunk<NW>(p, rows_s, s.pitch, 0, p.K, mean, rstd, nw_s, nb_s);
  } else if (p.norm != kNormNone) {
    const bf16* x = static_cast<const bf16*>(p.x);
    row_statistics(
        p, [&](int64_t m) { return x + m * p.K; }, mean, rstd);
  }
  const bool staged = s.operands_staged;

  for (int64_t tile = blockIdx.x; tile < s.tiles; tile += gridDim.x) {
    if (threadIdx.x == 0 && tile + 2 * gridDim.x < s.tiles)
      prefetch_tile<bf16, true, kDual>(p, tile + 2 * gridDim.x, s.rows_per_tile);
    if (staged) stage_operands(p, tile_ops, tile * s.rows_per_tile, s.rows_per_tile);
    const int64_t n_lo = rows_of(tile), n_hi = n_lo + 8;
    const bool live_lo = n_lo < p.N, live_hi = n_hi < p.N;
    float acc[kNT][4] = {}, acc2[kDual ? kNT : 1][4] = {};
    for (int64_t first = 0; first < p.K; first += s.chunk) {
      const int64_t count = std::min(s.chunk, p.K - first);
      if (!whole) {
        __syncthreads();  // the previous chunk's products are done with rows_s
        stage_chunk<NW>(p, rows_s, s.pitch, first, count, mean, rstd, nw_s, nb_s);
      }
      const int64_t blocks = count / 32, step = static_cast<int64_t>(split) * kUnroll;
      const bf16* w_lo = weight + n_lo * p.K + first + 8 * quad;
      const bf16* w_hi = weight + n_hi * p.K + first + 8 * quad;
      const bf16* x_s = rows_s + g * s.pitch + 8 * quad;
      const auto load = [&](WeightPass<kUnroll, kDual>& pass, int64_t b0) {
        pass.load(w_lo, w_hi, live_lo, live_hi, b0, split, blocks, weight2 - weight);
      };
      if (!(tile == blockIdx.x && first == 0)) load(pass_a, slice);
      for (int64_t b0 = slice; b0 < blocks; b0 += 2 * step) {
        if (b0 + step < blocks) load(pass_b, b0 + step);
        pass_a.products(acc, acc2, x_s, s.pitch, b0, split, blocks);
        if (b0 + 2 * step < blocks) load(pass_a, b0 + 2 * step);
        if (b0 + step < blocks) pass_b.products(acc, acc2, x_s, s.pitch, b0 + step, split, blocks);
      }
    }
    // The C fragment: acc[j][0..1] are features g, rows 8 j + 2 quad + {0, 1}; acc[j][2..3] feature g + 8.
    float* mine = partial + warp * 16 * kPartial;
    float* mine2 = partial2 + warp * 16 * kPartial;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int m = 8 * j + 2 * quad;
      mine[g * kPartial + m] = acc[j][0];
      mine[g * kPartial + m + 1] = acc[j][1];
      mine[(g + 8) * kPartial + m] = acc[j][2];
      mine[(g + 8) * kPartial + m + 1] = acc[j][3];
      if constexpr (kDual) {
        mine2[g * kPartial + m] = acc2[j][0];
        mine2[g * kPartial + m + 1] = acc2[j][1];
        mine2[(g + 8) * kPartial + m] = acc2[j][2];
        mine2[(g + 8) * kPartial + m + 1] = acc2[j][3];
      }
    }
    cp_async_wait<0>();  // this thread's copies of the tile's epilogue operands
    __syncthreads();
    // Each output of the tile once: consecutive threads take consecutive features of one row (coalesced stores).
    for (int i = threadIdx.x; i < p.rows * s.rows_per_tile; i += kThreads) {
      const int m = i / s.rows_per_tile, f = i % s.rows_per_tile;
      const int64_t n = tile * s.rows_per_tile + f;
      if (n >= p.N) continue;
      const int first_warp = (f / 16) * split, r = f % 16;
      float v = 0.f, v2 = 0.f;
      for (int w = 0; w < split; ++w) {
        v += partial[((first_warp + w) * 16 + r) * kPartial + m];
        if constexpr (kDual) v2 += partial2[((first_warp + w) * 16 + r) * kPartial + m];
      }
      EpilogueInputs e;
      if (staged) {
        if (p.bias) e.bias = to_f32(tile_ops.bias[f]);
        if (p.bias2) e.bias2 = to_f32(tile_ops.bias2[f]);
        if (p.residual) e.residual = to_f32(tile_ops.residual[m * kMaxTile + f]);
      } else {
        e = load_epilogue<bf16>(p, m, n);
      }
      finish<bf16>(p, m, n, v, v2, e);
    }
    __syncthreads();  // the partial sums and operands are rewritten by the next tile
  }
}

// Shared memory besides the staged rows: statistics, partial sums, the tile's epilogue operands.
size_t fixed_shared_bytes(int rows, bool dual) {
  return (2 * kStatsRows + (dual ? 2 : 1) * kWarps * 16 * (rows + 1)) * sizeof(float) +
         (2 + rows) * kMaxTile * sizeof(bf16);
}

// A row pitch of 64 bytes mod 128: the 8 lanes of a 16-byte phase (4 lanes on each of 2 rows) hit 8 bank groups.
int64_t pitch_for(int64_t chunk) {
  return (chunk * 2) % 128 == 0 ? chunk + 32 : chunk;
}

int shared_limit() {
  static thread_local std::pair<int, int> cached{-1, 0};  // (device, bytes)
  const int device = rc::current_device();
  if (cached.first != device) cached = {device, static_cast<int>(rc::device_properties(device).sharedMemPerBlockOptin)};
  return cached.second;
}

MmaShape shape_for(Params& p, int rows) {
  MmaShape s{};
  const bool dual = p.weight2 != nullptr;
  // The norm's parameters take 2 K values (at most f32) when the rows are staged whole.
  const int64_t norm_bytes = p.norm != kNormNone ? 2 * p.K * 4 : 0;
  const int64_t room = static_cast<int64_t>(shared_limit()) - static_cast<int64_t>(fixed_shared_bytes(rows, dual));
  // The whole rows if they fit, else the fewest equal chunks that do.
  const int64_t most = std::max<int64_t>(32, (room / (rows * 2) - 32) / 32 * 32);
  const int64_t chunks = (p.K + most - 1) / most;
  s.chunk = pitch_for(p.K) * rows * 2 + norm_bytes <= room ? p.K : ((p.K + chunks - 1) / chunks + 31) / 32 * 32;
  s.pitch = pitch_for(s.chunk);
  // Warps per group of 16 features: 1 while the tiles fill the SMs, more (each taking a share of k) while they do not
  // and each warp keeps at least two 32-wide blocks of k.
  const int64_t blocks = std::min(s.chunk, p.K) / 32;
  const auto tiles_for = [&](int split) {
    const int64_t per_tile = 16 * (kWarps / split);
    return (p.N + per_tile - 1) / per_tile;
  };
  int split = 1;
  while (split < kWarps && tiles_for(split) < sm_count() && blocks >= 2 * split) split *= 2;
  p.split = split;
  s.operands_staged = p.N % 8 == 0 && aligned16(p.bias) && aligned16(p.bias2) && aligned16(p.residual);
  s.rows_per_tile = 16 * (kWarps / split);
  s.tiles = tiles_for(split);
  return s;
}

template <int kNT, bool kDual, typename NW>
void launch_typed(Params p, bool dependent) {
  static KernelFacts facts;
  constexpr int kRows = 8 * kNT;
  const MmaShape s = shape_for(p, kRows);
  const size_t norm_bytes = s.chunk >= p.K && p.norm != kNormNone ? 2 * p.K * sizeof(NW) : 0;
  const size_t shared =
      fixed_shared_bytes(kRows, kDual) + static_cast<size_t>(kRows * s.pitch) * sizeof(bf16) + norm_bytes;
  auto* kernel = &mma_kernel<kNT, kDual, NW>;
  const int64_t resident =
      static_cast<int64_t>(sm_count()) * blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, shared, facts);
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(s.tiles, resident)));
  launch_dependent(kernel, dim3(grid), dim3(kThreads), shared, rc::current_stream(), dependent, p, s);
}

template <int kNT>
void launch_rows(const Params& p, bool dependent) {
  const bool dual = p.weight2 != nullptr;
  if (p.norm_f32) {
    if (dual) return launch_typed<kNT, true, float>(p, dependent);
    return launch_typed<kNT, false, float>(p, dependent);
  }
  if (dual) return launch_typed<kNT, true, bf16>(p, dependent);
  launch_typed<kNT, false, bf16>(p, dependent);
}

}  // namespace

int64_t mma_min_rows() {
  // RETORT_DECODE_MMA_MIN_ROWS moves the crossing from the CUDA-core kernel (for measurements); clamped to [1, 33].
  static const int64_t rows = [] {
    const char* value = std::getenv("RETORT_DECODE_MMA_MIN_ROWS");
    const int64_t parsed = value ? std::strtoll(value, nullptr, 10) : 5;
    return std::clamp<int64_t>(parsed, 1, kMmaMaxRows + 1);
  }();
  return rows;
}

bool mma_takes(const Params& p, DType dtype, bool vec) {
  return dtype == DType::BF16 && vec && p.K % 32 == 0 && p.rows >= mma_min_rows() && p.rows <= kMmaMaxRows &&
         (!p.residual || aligned16(p.residual));
}

void launch_mma(const Params& p, bool dependent) {
  switch ((p.rows + 7) / 8) {
    case 1:
      return launch_rows<1>(p, dependent);
    case 2:
      return launch_rows<2>(p, dependent);
    case 3:
      return launch_rows<3>(p, dependent);
    default:
      return launch_rows<4>(p, dependent);
  }
}

}  // namespace retort::kernels::cuda::small_m
