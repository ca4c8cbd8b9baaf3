// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Fused causal attention with grouped-query heads (bf16, head size 64 or 128): no [T, T] tensor is ever formed.
// q [B, T, H * D], k and v [B, T, KV * D], each read in place through its row stride (the packed [B, T, 3C]
// projections of GPT are KV = H with stride 3C), query head h reading key/value head h / (H / KV).
//
// Forward: one CTA of 4 warps takes 128 query rows of one head (32 rows a warp, two 16-row blocks sharing each K
// and V fragment it reads) and walks the key tiles (64 keys; 32 at head size 128, to keep the accumulators in
// registers) up to the diagonal with the online softmax (running row max m and sum l; a new max rescales the sum
// and the output accumulator by exp(m_old - m_new)). Products on the tensor cores: mma.sync m16n8k16 bf16 with
// float32 accumulation, operands from shared memory through ldmatrix (.trans for V), K and V tiles double-buffered
// with cp.async so the next tile loads while this one is multiplied. Saved for the backward pass: the output and
// the float32 log-sum-exp of each (b, h, t) row of scaled scores (natural log).
//
// Backward (the recomputation of FlashAttention-2): Dvec = rowsum(dO * O) per (b, h, t) first; then one CTA per
// key tile (128 keys at head size 128, 64 at 64; 16 a warp) of one key/value head holds K and V and walks every
// 64-row query tile at or below the diagonal of every query head of its group, recomputing P = exp(S - lse) and
// dS = P (dP - Dvec) with dP = dO V^T, accumulating dV += P^T dO and dK += dS^T Q in registers (so the group's sum
// needs no atomics) and adding dQ += dS K into a float32 buffer with 16-byte atomics (dS goes through shared
// memory: its rows are split across warps by key, dQ's by query). A last pass scales dQ and writes it in the
// gradient's dtype and row stride.
//
// Causal: tiles above the diagonal are never visited; in a diagonal tile, key > query is masked. Rows past T load
// as zeros (cp.async zero-fill) and are never stored: a padded query's zero q and dO give it dS = 0, a padded key
// is masked for every real query.
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/kernels/backends.h"
#include "core/kernels/cuda/flash_attention.h"
#include "core/kernels/cuda/flash_attention_parts.cuh"
#include "core/kernels/cuda/ptx.cuh"

namespace retort::kernels::cuda {
namespace {
using namespace detail;
using namespace ptx;
using namespace flash;

constexpr int kTile = 64;  // the backward's query rows per tile, and the default tile height
constexpr int kWarps = 4;  // of a forward CTA
constexpr int kThreads = 32 * kWarps;

// ---- shared-memory tiles ------------------------------------------------------------------------------------
// A tile of rows of kCols bf16, in 16-byte chunks whose index is XOR-ed with the row's low 3 bits: the 8 row
// addresses of one ldmatrix matrix (same column, consecutive rows) then fall in 8 different bank groups instead
// of one.
template <int kCols>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * kCols + ((chunk ^ (row & 7)) << 3);
}

// Rows [0, kRows) of a [.., stride] bf16 matrix starting at src into a swizzled tile; rows >= valid are zeros.
template <int kCols, int kRows = kTile, int kThreadsT = kThreads>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int64_t stride, int valid) {
  constexpr int kChunks = kCols / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreadsT) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    cp_async16(smem_addr(tile + swizzle<kCols>(r, c)), src + (ok ? r : 0) * stride + c * 8, ok);
  }
}

// ldmatrix addresses. Lane l feeds row l % 8 of matrix l / 8.
// A operand (16x16 at rows r0, cols c0 of a row-major tile): matrices (r0, c0) (r0 + 8, c0) (r0, c0 + 8)
// (r0 + 8, c0 + 8) are a0 .. a3.
template <int kCols>
__device__ __forceinline__ uint32_t a_addr(const bf16* tile, int r0, int c0, int lane) {
  return smem_addr(tile + swizzle<kCols>(r0 + (lane & 15), (c0 >> 3) + (lane >> 4)));
}
// B operands of two n-tiles from a tile stored [n][k] (K for S = Q K^T): matrices (n0, k0) (n0, k0 + 8)
// (n0 + 8, k0) (n0 + 8, k0 + 8) are b0, b1 of n-tile n0 and b0, b1 of n-tile n0 + 8 (no transpose).
template <int kCols>
__device__ __forceinline__ uint32_t bt_addr(const bf16* tile, int n0, int k0, int lane) {
  const int m = lane >> 3;
  return smem_addr(tile + swizzle<kCols>(n0 + ((m >> 1) << 3) + (lane & 7), (k0 >> 3) + (m & 1)));
}
// B operands of two n-tiles from a tile stored [k][n] (V for O = P V), loaded with .trans: matrices (k0, n0)
// (k0 + 8, n0) (k0, n0 + 8) (k0 + 8, n0 + 8).
template <int kCols>
__device__ __forceinline__ uint32_t b_addr(const bf16* tile, int k0, int n0, int lane) {
  const int m = lane >> 3;
  return smem_addr(tile + swizzle<kCols>(k0 + ((m & 1) << 3) + (lane & 7), (n0 >> 3) + (m >> 1)));
}
// A operand (16x16 at rows r0, cols c0) of a matrix stored transposed, [col][row] (dS^T for dQ = dS K), with
// .trans: matrices (c0, r0) (c0, r0 + 8) (c0 + 8, r0) (c0 + 8, r0 + 8) of the stored tile are a0 .. a3.
template <int kCols>
__device__ __forceinline__ uint32_t at_addr(const bf16* tile, int r0, int c0, int lane) {
  const int m = lane >> 3;
  return smem_addr(tile + swizzle<kCols>(c0 + ((m >> 1) << 3) + (lane & 7), (r0 >> 3) + (m & 1)));
}

// Forward, M 16-row blocks a warp (a query tile of 64 M rows): with M = 2 every K and V fragment read from shared
// memory feeds two products, which halves the shared-memory traffic per product. Q's fragments stay in registers
// when they fit beside the accumulators (M D <= 128), else they are read again for each key tile. N keys a tile
// (64, or 32 where 64 would not leave the registers the accumulators need).
template <int D, int M, int N>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const ForwardArgs a) {
  constexpr int kRows = kWarps * 16 * M;  // query rows of the CTA
  constexpr bool kQInRegisters = M * D <= 128;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sq = reinterpret_cast<bf16*>(smem);
  bf16* sk = sq + kRows * D;  // 2 stages
  bf16* sv = sk + 2 * N * D;  // 2 stages
  // The longest rows (the last query tiles) start first, so the short ones fill the tail of the grid.
  const int q_tile = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / a.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int q0 = q_tile * kRows;
  const int wr = warp * 16 * M;  // this warp's first row in the tile
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const bf16* kbase = a.k + row0 * a.k_stride + kvh * D;
  const bf16* vbase = a.v + row0 * a.v_stride + kvh * D;

  load_tile<D, kRows>(sq, a.q + (row0 + q0) * a.q_stride + h * D, a.q_stride, a.T - q0);
  load_tile<D, N>(sk, kbase, a.k_stride, a.T);
  load_tile<D, N>(sv, vbase, a.v_stride, a.T);
  cp_async_commit();

  float o[M][D / 8][4];
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.f;
  // Per row g and g + 8 of each block; l is this thread's part of the row sum (its quad's parts add up at the end).
  float m[M][2], l[M][2];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.f;
  uint32_t qf[kQInRegisters ? M : 1][D / 16][4];

  // Key tiles up to the last row's diagonal, none wholly past T.
  const int tiles = min((q0 + kRows - 1) / N + 1, (a.T + N - 1) / N);
  for (int j = 0; j < tiles; ++j) {
    const bf16* sk_j = sk + (j & 1) * N * D;
    const bf16* sv_j = sv + (j & 1) * N * D;
    if (j + 1 < tiles) {
      const int k1 = (j + 1) * N;
      load_tile<D, N>(sk + ((j + 1) & 1) * N * D, kbase + k1 * a.k_stride, a.k_stride, a.T - k1);
      load_tile<D, N>(sv + ((j + 1) & 1) * N * D, vbase + k1 * a.v_stride, a.v_stride, a.T - k1);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kQInRegisters && j == 0) {
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(qf[kQInRegisters ? mi : 0][kk], a_addr<D>(sq, wr + mi * 16, kk * 16, lane));
    }

    // A warp whose rows all precede the tile's first key has nothing to add (every score masked).
    const int k0 = j * N;
    if (k0 <= q0 + wr + 16 * M - 1) {
      // S = Q K^T for this warp's 16 M rows and the tile's N keys.
      float s[M][N / 8][4];
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int n = 0; n < N / 8; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qr[kQInRegisters ? 1 : M][4];
        if constexpr (!kQInRegisters) {
#pragma unroll
          for (int mi = 0; mi < M; ++mi) ldmatrix_x4(qr[mi], a_addr<D>(sq, wr + mi * 16, kk * 16, lane));
        }
#pragma unroll
        for (int nn = 0; nn < N / 16; ++nn) {
          uint32_t r[4];
          ldmatrix_x4(r, bt_addr<D>(sk_j, nn * 16, kk * 16, lane));
#pragma unroll
          for (int mi = 0; mi < M; ++mi) {
            const uint32_t(&qa)[4] = kQInRegisters ? qf[kQInRegisters ? mi : 0][kk] : qr[kQInRegisters ? 0 : mi];
            mma(s[mi][2 * nn], qa, r[0], r[1]);
            mma(s[mi][2 * nn + 1], qa, r[2], r[3]);
          }
        }
      }

      // Base-2 scaled scores; key > query is masked where the tile reaches past the warp's first row.
      const bool masking = k0 + N - 1 > q0 + wr;
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int n = 0; n < N / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mi][n][e] *= a.scale_log2;
            if (masking && k0 + n * 8 + 2 * tig + (e & 1) > q0 + wr + mi * 16 + g + (e >> 1) * 8)
              s[mi][n][e] = -INFINITY;
          }

          // Online softmax. Every row sees key 0 in the first tile, so its max is finite from then on; a row with all
          // of a later tile masked keeps its max (correction 1) and adds zeros.
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = m[mi][r];
#pragma unroll
          for (int n = 0; n < N / 8; ++n) mx = fmaxf(mx, fmaxf(s[mi][n][2 * r], s[mi][n][2 * r + 1]));
          mx = quad_max(mx);
          const float correction = exp2f(m[mi][r] - mx);  // 0 on the first tile (m = -inf)
          m[mi][r] = mx;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < N / 8; ++n) {
            s[mi][n][2 * r] = exp2f(s[mi][n][2 * r] - mx);
            s[mi][n][2 * r + 1] = exp2f(s[mi][n][2 * r + 1] - mx);
            sum += s[mi][n][2 * r] + s[mi][n][2 * r + 1];
          }
          l[mi][r] = l[mi][r] * correction + sum;
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[mi][n][2 * r] *= correction;
            o[mi][n][2 * r + 1] *= correction;
          }
        }

        // O += P V, P straight from the score registers.
#pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) {
        uint32_t pa[M][4];
#pragma unroll
        for (int mi = 0; mi < M; ++mi) c_to_a(pa[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
        for (int nd = 0; nd < D / 16; ++nd) {
          uint32_t r[4];
          ldmatrix_x4_trans(r, b_addr<D>(sv_j, kk * 16, nd * 16, lane));
#pragma unroll
          for (int mi = 0; mi < M; ++mi) {
            mma(o[mi][2 * nd], pa[mi], r[0], r[1]);
            mma(o[mi][2 * nd + 1], pa[mi], r[2], r[3]);
          }
        }
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites the stage read here
  }

#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[mi][r]);
      const float inv = 1.f / sum;
      const int t = q0 + wr + mi * 16 + g + r * 8;
      if (t >= a.T) continue;
      bf16* dst = a.out + (row0 + t) * a.out_stride + h * D + 2 * tig;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16(o[mi][n][2 * r] * inv, o[mi][n][2 * r + 1] * inv);
      if (tig == 0) a.lse[(static_cast<int64_t>(b) * a.H + h) * a.T + t] = (m[mi][r] + log2f(sum)) * kLn2;
    }
}

// The backward's memory-bound preparation in one pass: Dvec[b, h, t] = sum_d dO[b, t, h, d] O[b, t, h, d] in float32,
// and dQ's float32 accumulator zeroed for the backward's atomic adds. Apart, a warp a row read 4 bytes a lane at a time
// (137 us for 269 MB at 16 x 1024 x 32 x 128, 2 TB/s, Nsight Compute on an H200) and the memset was a pass of its own.
// Here a lane reads 16-byte pieces, D / 8 lanes a row, kUnroll rows' pieces in flight before it sums, and rows go in
// Dvec's (b, h, t) order so that a warp's stores of Dvec are contiguous; the zeroing stores run beside the loads:
// 151 us for both there (3.6 TB/s), the backward 17-50 us faster (docs/benchmarks.md).
template <int D>
__global__ void __launch_bounds__(256)
    prepare_backward_kernel(const bf16* dout, int64_t dout_stride, const bf16* out, int64_t out_stride, float* dvec,
                            int B, int T, int H, float4* acc, int64_t acc_packs) {
  constexpr int kLanes = D / 8, kRows = 32 / kLanes, kUnroll = 4;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < acc_packs; i += threads) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  const int64_t rows = static_cast<int64_t>(B) * H * T;
  const int lane = threadIdx.x & 31, piece = lane % kLanes;
  const int64_t step = threads / 32 * kRows * kUnroll;
  for (int64_t r0 = tid / 32 * kRows * kUnroll; r0 < rows; r0 += step) {  // the same for the whole warp
    uint4 x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t r = r0 + u * kRows + lane / kLanes;
      x[u] = y[u] = make_uint4(0, 0, 0, 0);
      if (r < rows) {
        const int64_t bh = r / T, t = r % T;
        const int64_t bt = bh / H * T + t, col = bh % H * D + piece * 8;
        x[u] = *reinterpret_cast<const uint4*>(dout + bt * dout_stride + col);
        y[u] = *reinterpret_cast<const uint4*>(out + bt * out_stride + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const auto* px = reinterpret_cast<const __nv_bfloat162*>(&x[u]);
      const auto* py = reinterpret_cast<const __nv_bfloat162*>(&y[u]);
      float dot = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 fx = __bfloat1622float2(px[k]), fy = __bfloat1622float2(py[k]);
        dot += fx.x * fy.x + fx.y * fy.y;
      }
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const int64_t r = r0 + u * kRows + lane / kLanes;
      if (piece == 0 && r < rows) dvec[r] = dot;
    }
  }
}

// Backward, one CTA per kKeyWarps * 16 keys of one key/value head (16 keys a warp), walking 64-row query tiles.
// Wider key tiles (8 warps, 128 keys) halve the dQ atomics, which are summed over the tile's keys first.
template <int D, int kKeyWarps>
__global__ void __launch_bounds__(32 * kKeyWarps) flash_backward_kernel(const BackwardArgs a) {
  constexpr int kKeys = 16 * kKeyWarps;
  constexpr int kThreadsT = 32 * kKeyWarps;
  constexpr int kQueryWarps = kKeyWarps >= 4 ? 4 : kKeyWarps;  // warps splitting dQ's 64 rows (16 each)
  constexpr int kColumnSplit = kKeyWarps / kQueryWarps;        // and its D columns
  constexpr int kDqCols = D / kColumnSplit;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sk = reinterpret_cast<bf16*>(smem);
  bf16* sv = sk + kKeys * D;
  bf16* sq = sv + kKeys * D;                                    // 2 stages
  bf16* sdo = sq + 2 * kTile * D;                               // 2 stages
  bf16* sds = sdo + 2 * kTile * D;                              // [key][query], kKeys x kTile
  float* slse = reinterpret_cast<float*>(sds + kKeys * kTile);  // 2 stages
  float* sdvec = slse + 2 * kTile;                              // 2 stages

  const int k_tile = blockIdx.x;  // the first key tiles see the most query tiles: they start first
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = k_tile * kKeys;
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const BackwardWalk walk(a, kvh, k0, kTile);
  const int steps = walk.steps;

  auto load_step = [&](int i) {
    load_backward_step<D, kTile>(a, walk.head(i), walk.first_query(i, kTile), b, row0, i & 1, sq, sdo, slse, sdvec,
                                 [](bf16* tile, const bf16* src, int64_t stride, int valid) {
                                   load_tile<D, kTile, kThreadsT>(tile, src, stride, valid);
                                 });
  };

  load_tile<D, kKeys, kThreadsT>(sk, a.k + (row0 + k0) * a.k_stride + kvh * D, a.k_stride, a.T - k0);
  load_tile<D, kKeys, kThreadsT>(sv, a.v + (row0 + k0) * a.v_stride + kvh * D, a.v_stride, a.T - k0);
  load_step(0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

  const int kw = warp * 16;  // this warp's keys within the tile
  for (int i = 0; i < steps; ++i) {
    if (i + 1 < steps) load_step(i + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int stage = i & 1;
    const bf16* sq_i = sq + stage * kTile * D;
    const bf16* sdo_i = sdo + stage * kTile * D;
    const float* slse_i = slse + stage * kTile;
    const float* sdvec_i = sdvec + stage * kTile;
    const int h = walk.head(i);
    const int q0 = walk.first_query(i, kTile);

    // A warp whose keys all follow the tile's last query has P = 0: it only writes its zero dS block.
    const bool live = k0 + kw <= q0 + kTile - 1;
    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
    if (live) {
      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys and the tile's 64 queries.
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t kf[4], vf[4];
        ldmatrix_x4(kf, a_addr<D>(sk, kw, kk * 16, lane));
        ldmatrix_x4(vf, a_addr<D>(sv, kw, kk * 16, lane));
#pragma unroll
        for (int nn = 0; nn < 4; ++nn) {
          uint32_t r[4];
          ldmatrix_x4(r, bt_addr<D>(sq_i, nn * 16, kk * 16, lane));
          mma(s[2 * nn], kf, r[0], r[1]);
          mma(s[2 * nn + 1], kf, r[2], r[3]);
          ldmatrix_x4(r, bt_addr<D>(sdo_i, nn * 16, kk * 16, lane));
          mma(dp[2 * nn], vf, r[0], r[1]);
          mma(dp[2 * nn + 1], vf, r[2], r[3]);
        }
      }

      // P^T = exp2(S^T scale_log2 - lse log2 e), 0 where key > query; dS^T = P^T (dP^T - Dvec).
      const bool masking = k0 + kw + 15 > q0;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = n * 8 + 2 * tig + (e & 1);  // query column within the tile
          const int kr = kw + g + (e >> 1) * 8;      // key row within the tile
          float p = exp2f(s[n][e] * a.scale_log2 - slse_i[qc] * kLog2e);
          if (masking && k0 + kr > q0 + qc) p = 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - sdvec_i[qc]);
        }
    }

    // dV += P^T dO and dK += dS^T Q over the tile's queries; dS^T to shared memory for dQ.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4], dsa[4];
      c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      c_to_a(dsa, dp[2 * kk], dp[2 * kk + 1]);
      if (live) {
#pragma unroll
        for (int nd = 0; nd < D / 16; ++nd) {
          uint32_t r[4];
          ldmatrix_x4_trans(r, b_addr<D>(sdo_i, kk * 16, nd * 16, lane));
          mma(dv[2 * nd], pa, r[0], r[1]);
          mma(dv[2 * nd + 1], pa, r[2], r[3]);
          ldmatrix_x4_trans(r, b_addr<D>(sq_i, kk * 16, nd * 16, lane));
          mma(dk[2 * nd], dsa, r[0], r[1]);
          mma(dk[2 * nd + 1], dsa, r[2], r[3]);
        }
      }
      // dS^T rows kw + g (+ 8), query columns 16 kk + 2 tig (+ 8): the A fragment's own layout.
      const int c = 2 * kk;  // chunk of columns 16 kk .. 16 kk + 7
      *reinterpret_cast<uint32_t*>(sds + swizzle<kTile>(kw + g, c) + 2 * tig) = dsa[0];
      *reinterpret_cast<uint32_t*>(sds + swizzle<kTile>(kw + g + 8, c) + 2 * tig) = dsa[1];
      *reinterpret_cast<uint32_t*>(sds + swizzle<kTile>(kw + g, c + 1) + 2 * tig) = dsa[2];
      *reinterpret_cast<uint32_t*>(sds + swizzle<kTile>(kw + g + 8, c + 1) + 2 * tig) = dsa[3];
    }
    __syncthreads();

    // dQ += dS K over the tile's keys: this warp's 16 queries and kDqCols columns, added into the float32
    // accumulator. Keys past the last live warp's contribute zeros and are skipped.
    const int qr = (warp % kQueryWarps) * 16;
    const int c0 = (warp / kQueryWarps) * kDqCols;
    const int live_keys = min(kKeys, q0 + kTile - k0);  // keys 0 .. live_keys - 1 of the tile can be <= a query
    float dq[kDqCols / 8][4];
#pragma unroll
    for (int n = 0; n < kDqCols / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      if (kk * 16 >= live_keys) break;
      uint32_t dsa[4];
      ldmatrix_x4_trans(dsa, at_addr<kTile>(sds, qr, kk * 16, lane));
#pragma unroll
      for (int nd = 0; nd < kDqCols / 16; ++nd) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, b_addr<D>(sk, kk * 16, c0 + nd * 16, lane));
        mma(dq[2 * nd], dsa, r[0], r[1]);
        mma(dq[2 * nd + 1], dsa, r[2], r[3]);
      }
    }
    const int t = q0 + qr + g;
    float* row_g = a.dq + ((row0 + t) * a.H + h) * D + c0;
    add_dq<kDqCols>(dq, row_g, row_g + 8 * a.H * D, tig, t < a.T, t + 8 < a.T);
    __syncthreads();  // sds and the stage read here are overwritten next
  }

  store_dk_dv<D>(a, dk, dv, row0, k0 + kw + g, kvh, tig);
}

// dq[b, t, h * D + d] = scale * acc(b, t, h, d), in the gradient's row stride, from the accumulator in the gradient's
// own order (DqLayout::Rows): 8 elements a thread.
template <int D>
__global__ void finish_dq_rows_kernel(const float* acc, bf16* dq, int64_t dq_stride, int64_t rows, int H, float scale) {
  const int64_t packs = rows * H * D / 8;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * 8;
    float v[8];
    load8(acc + e, v);
#pragma unroll
    for (float& x : v) x *= scale;
    store8(dq + e / (H * D) * dq_stride + e % (H * D), v);
  }
}

// The same from the accumulator in DqLayout::Fragments: a CTA a half of one query tile (64 rows x D / 2 columns,
// contiguous there), read as the 4-float runs the backward added, so a warp's loads cover 512 contiguous bytes; staged
// as bf16 rows in shared memory; written as 16-byte pieces of rows. (Reading each output row's values straight from
// the fragments takes 8-byte loads 16 bytes apart, half of every sector: 3.8 times the time, Nsight Compute on an
// H200, docs/benchmarks.md.)
template <int D>
__global__ void __launch_bounds__(256)
    finish_dq_fragments_kernel(const float* acc, bf16* dq, int64_t dq_stride, int T, int H, float scale) {
  constexpr int kHalf = D / 2, kBlocks = kHalf / 8;
  constexpr int kPitch = kHalf + 8;  // bf16 a staged row: 16 bytes more spread 8 rows' pairs over the 32 banks
  __shared__ __align__(16) bf16 staged[64 * kPitch];
  const int tiles = (T + 63) / 64;
  const int64_t block = blockIdx.x;  // ((b H + h) tiles + tile) 2 + half, the accumulator's order
  const int half = static_cast<int>(block % 2), tile = static_cast<int>(block / 2 % tiles);
  const int64_t bh = block / 2 / tiles;
  const int h = static_cast<int>(bh % H);
  const int64_t b = bh / H;
  const float4* from = reinterpret_cast<const float4*>(acc + block * 64 * kHalf);
  for (int i = threadIdx.x; i < 64 * kHalf / 4; i += 256) {
    // Run i: lane i % 32 of column block n of warp w (dq_fragment_offset), rows 16 w + g and + 8, columns 8 n + 2 tig.
    const float4 v = from[i];
    const int lane = i % 32, w = i / 32 / kBlocks, n = i / 32 % kBlocks;
    const int r = 16 * w + lane / 4, c = 8 * n + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(&staged[r * kPitch + c]) = pack_bf16(v.x * scale, v.y * scale);
    *reinterpret_cast<uint32_t*>(&staged[(r + 8) * kPitch + c]) = pack_bf16(v.z * scale, v.w * scale);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 64 * kBlocks; i += 256) {
    const int r = i / kBlocks, c = i % kBlocks * 8, t = tile * 64 + r;
    if (t < T)
      *reinterpret_cast<uint4*>(dq + (b * T + t) * dq_stride + h * D + half * kHalf + c) =
          *reinterpret_cast<const uint4*>(&staged[r * kPitch + c]);
  }
}

int64_t forward_smem(int D, int M, int N) {
  return (kWarps * 16 * M + 4 * N) * D * 2;  // Q, and two stages of K and V
}
int64_t backward_smem(int D, int key_warps) {
  const int64_t keys = 16 * key_warps;
  return (2 * keys + 4 * kTile) * D * 2 + keys * kTile * 2 + 4 * kTile * 4;  // K, V, 2 stages of Q, dO; dS; vectors
}

template <typename Kernel>
void allow_smem(Kernel kernel, int64_t bytes) {
  // Per device and kernel; cheap enough to repeat on every launch.
  RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Batch, positions, query heads, key/value heads, head size, and where q, k, v start with their row strides.
struct Inputs {
  int64_t B, T, H, KV, D;
  const void *q, *k, *v;
  int64_t q_stride, k_stride, v_stride;
};

void forward(const Inputs& in, void* out, int64_t out_stride, float* lse) {
  if (in.B * in.T == 0) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.D)));
  const ForwardArgs a{static_cast<const bf16*>(in.q),
                      static_cast<const bf16*>(in.k),
                      static_cast<const bf16*>(in.v),
                      in.q_stride,
                      in.k_stride,
                      in.v_stride,
                      static_cast<bf16*>(out),
                      out_stride,
                      lse,
                      static_cast<int>(in.T),
                      static_cast<int>(in.H),
                      static_cast<int>(in.H / in.KV),
                      scale * kLog2e};
  // Hopper's warpgroup products where this build and GPU have them, unless RETORT_FLASH_FORWARD=mma asks for the
  // mma.sync kernel below (to measure them against each other; every other GPU takes it). That one takes 32 query
  // rows a warp (two row blocks sharing each K and V fragment; 10-20% faster than 16 on an H200) unless
  // RETORT_FLASH_ROWS=16 asks for its one-block form (which implies mma.sync).
  const char* forward_choice = std::getenv("RETORT_FLASH_FORWARD");
  const char* rows_choice = std::getenv("RETORT_FLASH_ROWS");
  const int M = rows_choice != nullptr && std::string_view(rows_choice) == "16" ? 1 : 2;
  const bool mma_sync = M == 1 || (forward_choice != nullptr && std::string_view(forward_choice) == "mma");
  if (!mma_sync && forward_wgmma(a, static_cast<int>(in.D), static_cast<int>(in.B), rc::current_stream())) return;
  const int64_t rows = kWarps * 16 * M;
  const dim3 grid(static_cast<unsigned>((in.T + rows - 1) / rows), static_cast<unsigned>(in.H),
                  static_cast<unsigned>(in.B));
  const int N = in.D == 128 && M == 2 ? 32 : 64;
  const int64_t smem_bytes = forward_smem(static_cast<int>(in.D), M, N);
  auto launch = [&](auto kernel) {
    allow_smem(kernel, smem_bytes);
    kernel<<<grid, kThreads, smem_bytes, rc::current_stream()>>>(a);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  if (in.D == 64) {
    launch(M == 1 ? flash_forward_kernel<64, 1, 64> : flash_forward_kernel<64, 2, 64>);
  } else {
    launch(M == 1 ? flash_forward_kernel<128, 1, 64> : flash_forward_kernel<128, 2, 32>);
  }
}

void backward(const Inputs& in, const void* dout, int64_t dout_stride, const void* out, int64_t out_stride,
              const float* lse, void* dq, int64_t dq_stride, void* dk, int64_t dk_stride, void* dv, int64_t dv_stride) {
  if (in.B * in.T == 0) return;
  cudaStream_t stream = rc::current_stream();
  const int64_t rows = in.B * in.T;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.D)));
  rc::ScratchBuffer dvec(in.B * in.H * in.T * sizeof(float));
  // Room for either layout of the accumulator (DqLayout: Fragments rounds T up to a multiple of 64).
  const int64_t acc_bytes = in.B * ((in.T + 63) / 64 * 64) * in.H * in.D * static_cast<int64_t>(sizeof(float));
  rc::ScratchBuffer dq_acc(acc_bytes);

  auto run = [&](auto d_tag) {
    constexpr int D = decltype(d_tag)::value;
    prepare_backward_kernel<D><<<grid_for(rows * in.H * D / 8, 256), 256, 0, stream>>>(
        static_cast<const bf16*>(dout), dout_stride, static_cast<const bf16*>(out), out_stride,
        static_cast<float*>(dvec.data()), static_cast<int>(in.B), static_cast<int>(in.T), static_cast<int>(in.H),
        static_cast<float4*>(dq_acc.data()), acc_bytes / static_cast<int64_t>(sizeof(float4)));
    RETORT_CUDA_CHECK_LAUNCH();

    const BackwardArgs a{static_cast<const bf16*>(in.q),
                         static_cast<const bf16*>(in.k),
                         static_cast<const bf16*>(in.v),
                         static_cast<const bf16*>(dout),
                         in.q_stride,
                         in.k_stride,
                         in.v_stride,
                         dout_stride,
                         lse,
                         static_cast<const float*>(dvec.data()),
                         static_cast<float*>(dq_acc.data()),
                         static_cast<bf16*>(dk),
                         static_cast<bf16*>(dv),
                         dk_stride,
                         dv_stride,
                         static_cast<int>(in.T),
                         static_cast<int>(in.H),
                         static_cast<int>(in.H / in.KV),
                         scale * kLog2e,
                         scale};
    // Hopper's warpgroup products where this build and GPU have them, unless RETORT_FLASH_BACKWARD=mma or
    // RETORT_FLASH_KEYS asks for the mma.sync kernel below (every other GPU takes it). That one takes 128 keys a CTA
    // (8 warps) at head size 128 and 64 (4 warps) at 64, the faster of the two at each size on an H200
    // (docs/benchmarks.md; at 64 the 8-warp CTA's 177 registers a thread leave one CTA a multiprocessor, the 4-warp
    // one fits two); RETORT_FLASH_KEYS=64 or 128 picks one, to measure them against each other.
    const char* backward_choice = std::getenv("RETORT_FLASH_BACKWARD");
    const char* keys_choice = std::getenv("RETORT_FLASH_KEYS");
    const bool mma_sync =
        keys_choice != nullptr || (backward_choice != nullptr && std::string_view(backward_choice) == "mma");
    DqLayout layout = DqLayout::Rows;
    const bool done =
        !mma_sync && backward_wgmma(a, D, static_cast<int>(in.B), static_cast<int>(in.KV), stream, &layout);
    int key_warps = D == 128 ? 8 : 4;
    if (keys_choice != nullptr && std::string_view(keys_choice) == "64") key_warps = 4;
    if (keys_choice != nullptr && std::string_view(keys_choice) == "128") key_warps = 8;
    const int64_t keys = 16 * key_warps;
    const dim3 grid(static_cast<unsigned>((in.T + keys - 1) / keys), static_cast<unsigned>(in.KV),
                    static_cast<unsigned>(in.B));
    const int64_t smem_bytes = backward_smem(D, key_warps);
    auto kernel = key_warps == 4 ? flash_backward_kernel<D, 4> : flash_backward_kernel<D, 8>;
    if (!done) {
      allow_smem(kernel, smem_bytes);
      kernel<<<grid, 32 * key_warps, smem_bytes, stream>>>(a);
      RETORT_CUDA_CHECK_LAUNCH();
    }

    const auto* acc = static_cast<const float*>(dq_acc.data());
    if (layout == DqLayout::Fragments) {
      const auto halves = static_cast<unsigned>(in.B * in.H * ((in.T + 63) / 64) * 2);
      finish_dq_fragments_kernel<D><<<halves, 256, 0, stream>>>(acc, static_cast<bf16*>(dq), dq_stride,
                                                                static_cast<int>(in.T), static_cast<int>(in.H), scale);
    } else {
      finish_dq_rows_kernel<D><<<grid_for(rows * in.H * D / 8, 256), 256, 0, stream>>>(
          acc, static_cast<bf16*>(dq), dq_stride, rows, static_cast<int>(in.H), scale);
    }
    RETORT_CUDA_CHECK_LAUNCH();
  };
  if (in.D == 64) {
    run(std::integral_constant<int, 64>{});
  } else {
    run(std::integral_constant<int, 128>{});
  }
}

// Byte address of column `col` of a tensor.
const void* at(const Tensor& t, int64_t col) {
  return static_cast<const char*>(t.raw_data()) + col * dtype_size(t.dtype());
}
void* at(Tensor& t, int64_t col) {
  return static_cast<char*>(t.raw_data()) + col * dtype_size(t.dtype());
}

Inputs packed_inputs(const Tensor& qkv, int n_head) {
  const int64_t C = qkv.size(2) / 3, D = C / n_head;
  return {qkv.size(0), qkv.size(1), n_head, n_head, D, at(qkv, 0), at(qkv, C), at(qkv, 2 * C), 3 * C, 3 * C, 3 * C};
}

Inputs split_inputs(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  return {q.size(0),    q.size(1),    n_head,    n_kv_head, q.size(2) / n_head, q.raw_data(),
          k.raw_data(), v.raw_data(), q.size(2), k.size(2), v.size(2)};
}

// The kernels read 16-byte packs: a view whose start is not 16-byte aligned is copied (a fresh tensor is).
Tensor aligned(const Tensor& t) {
  return aligned16(t.raw_data()) ? t : t.clone();
}

}  // namespace

bool flash_attention_fits(const Tensor& q, int64_t head_dim, std::initializer_list<const Tensor*> parts) {
  if (!q.device().is_cuda() || q.dtype() != DType::BF16 || (head_dim != 64 && head_dim != 128)) return false;
  for (const Tensor* t : parts)
    if (!aligned16(t->raw_data()) || t->size(-1) % 8 != 0) return false;
  return true;
}

void flash_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse) {
  rc::DeviceGuard guard(device_of(qkv, "flash_attention_forward"));
  forward(packed_inputs(qkv, n_head), out.raw_data(), out.size(2), lse.data<float>());
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                             Tensor& lse) {
  rc::DeviceGuard guard(device_of(q, "flash_attention_forward"));
  forward(split_inputs(q, k, v, n_head, n_kv_head), out.raw_data(), out.size(2), lse.data<float>());
}

void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                              Tensor& dqkv) {
  rc::DeviceGuard guard(device_of(qkv, "flash_attention_backward"));
  const Inputs in = packed_inputs(qkv, n_head);
  const int64_t C = in.H * in.D;
  const Tensor g = aligned(dout);
  backward(in, g.raw_data(), C, out.raw_data(), C, lse.data<float>(), at(dqkv, 0), 3 * C, at(dqkv, C), 3 * C,
           at(dqkv, 2 * C), 3 * C);
}

void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv) {
  rc::DeviceGuard guard(device_of(q, "flash_attention_backward"));
  const Inputs in = split_inputs(q, k, v, n_head, n_kv_head);
  const Tensor g = aligned(dout);
  backward(in, g.raw_data(), g.size(2), out.raw_data(), out.size(2), lse.data<float>(), dq.raw_data(), dq.size(2),
           dk.raw_data(), dk.size(2), dv.raw_data(), dv.size(2));
}

}  // namespace retort::kernels::cuda
