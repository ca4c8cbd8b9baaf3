// The small-m linear on the tensor cores: out [M, N] = epilogue(norm(x) [M, K] W^T + bias) for 9..32 bf16 rows (a
// decode step of a batch of sequences), one launch.
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
//   - the input rows are normed (float32 statistics, rounded to bf16 as a norm kernel stores them) and staged in
//     shared memory once per block, with a row pitch of 64 bytes mod 128, so the 8 lanes of a 16-byte phase read 8
//     different bank groups. Rows that do not fit shared memory whole are staged in chunks of K, per tile;
//   - a block of 8 warps owns 16 * 8 / split output features; `split` warps share a group of 16 features, each taking
//     every split-th 32-wide block of k. Their float32 sums meet in shared memory, are added in a fixed order
//     (deterministic, no atomics) and finished (bias, GELU, SwiGLU or residual, one rounding) with the rows of one
//     output row spread over consecutive threads;
//   - like the CUDA-core kernel, a dependent launch prefetches the first tile's weights into L2 before it waits.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include <algorithm>
#include <cstdlib>

#include "core/kernels/cuda/small_m_linear_parts.cuh"

namespace retort::kernels::cuda::small_m {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;     // 32-wide blocks of k whose weights a lane has in flight before its products
constexpr int kStatsRows = 32;  // the rows whose norm statistics shared memory holds (kMmaMaxRows)

// The shape of one launch, found on the host.
struct MmaShape {
  int64_t chunk;  // values of k staged at a time (a multiple of 32; K when the rows fit whole)
  int64_t pitch;  // of a staged row, in values
  int rows_per_tile;
  int64_t tiles;
};

// c += a b, a 16x16 bf16 A fragment, a 16x8 bf16 B fragment, float32 c.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The two products of one 32-wide block of k: weight rows g and g + 8 (w_lo, w_hi), input rows (x), 8 values each.
__device__ __forceinline__ void mma_block(float (&c)[4], const uint4& w_lo, const uint4& w_hi, const uint4& x) {
  mma_bf16(c, w_lo.x, w_hi.x, w_lo.y, w_hi.y, x.x, x.y);
  mma_bf16(c, w_lo.z, w_hi.z, w_lo.w, w_hi.w, x.z, x.w);
}

__device__ __forceinline__ uint4 load_weight(const bf16* p, bool live) {
  return live ? __ldcs(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

template <typename NW>
__device__ __forceinline__ void load_norm8(const void* p, int64_t k, float (&v)[8]) {
  load8(static_cast<const NW*>(p) + k, v);
}

// Each row's norm statistics (mean and 1 / rms about it; mean 0 for RMSNorm), one warp a row, as the norm kernels
// compute them: the mean, then the second moment about it.
__device__ void row_statistics(const Params& p, float* mean, float* rstd) {
  const bf16* x = static_cast<const bf16*>(p.x);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t packs = p.K / 8;
  const float inv_k = 1.f / static_cast<float>(p.K);
  for (int64_t m = warp; m < p.rows; m += kWarps) {
    const bf16* xr = x + m * p.K;
    float mu = 0.f;
    if (p.norm == kNormLayer) {
      float s = 0.f;
      for (int64_t q = lane; q < packs; q += 32) {
        float v[8];
        load8(xr + 8 * q, v);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += v[e];
      }
      mu = warp_sum(s) * inv_k;
    }
    float sq = 0.f;
    for (int64_t q = lane; q < packs; q += 32) {
      float v[8];
      load8(xr + 8 * q, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) sq += (v[e] - mu) * (v[e] - mu);
    }
    const float rs = 1.f / sqrtf(warp_sum(sq) * inv_k + p.eps);
    if (lane == 0) {
      mean[m] = mu;
      rstd[m] = rs;
    }
  }
}

// Values [first, first + count) of every input row into shared memory, normed and rounded to bf16 where the linear
// has a norm.
template <typename NW>
__device__ void stage_chunk(const Params& p, bf16* rows_s, int64_t pitch, int64_t first, int64_t count,
                            const float* mean, const float* rstd) {
  const bf16* x = static_cast<const bf16*>(p.x);
  const int64_t packs = count / 8;
  for (int64_t i = threadIdx.x; i < p.rows * packs; i += kThreads) {
    const int64_t m = i / packs, q = i % packs, k = first + 8 * q;
    float v[8];
    load8(x + m * p.K + k, v);
    if (p.norm != kNormNone) {
      float w[8], b[8] = {};
      load_norm8<NW>(p.norm_w, k, w);
      if (p.norm_b) load_norm8<NW>(p.norm_b, k, b);
      const float mu = mean[m], rs = rstd[m];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = (v[e] - mu) * rs * w[e] + b[e];
    }
    store8(rows_s + m * pitch + 8 * q, v);
  }
}

// kNT: products of 8 rows (M <= 8 kNT); kDual: a second weight (SwiGLU); NW: the storage of the norm's parameters.
template <int kNT, bool kDual, typename NW>
__global__ void __launch_bounds__(kThreads) mma_kernel(Params p, MmaShape s) {
  constexpr int kRows = 8 * kNT;      // staged rows, the last ones zero
  constexpr int kPartial = kRows + 1;  // pitch of a partial-sum row (odd: spreads a column's banks)
  extern __shared__ float4 shared_words[];
  float* mean = reinterpret_cast<float*>(shared_words);
  float* rstd = mean + kStatsRows;
  float* partial = rstd + kStatsRows;                     // [kWarps][16][kPartial]
  float* partial2 = partial + kWarps * 16 * kPartial;     // the same for weight2
  bf16* rows_s = reinterpret_cast<bf16*>(partial2 + (kDual ? kWarps * 16 * kPartial : 0));

  allow_dependents();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int split = p.split, group = warp / split, slice = warp % split;
  const int g = lane / 4, quad = lane % 4;
  const bf16* weight = static_cast<const bf16*>(p.weight);
  const bf16* weight2 = static_cast<const bf16*>(p.weight2);
  if (threadIdx.x == 0) {
    prefetch_tile<bf16, true, kDual>(p, blockIdx.x, s.rows_per_tile);
    prefetch_norm(p, true);
  }
  // The padding rows stay zero (their sums are never stored; zero keeps them finite).
  for (int64_t i = threadIdx.x; i < (kRows - p.rows) * s.pitch; i += kThreads) rows_s[p.rows * s.pitch + i] = bf16(0.f);

  wait_for_prerequisites();  // the input rows (and the residual) come from the kernels before
  if (p.norm != kNormNone) row_statistics(p, mean, rstd);
  const bool whole = s.chunk >= p.K;
  if (whole) {
    __syncthreads();
    stage_chunk<NW>(p, rows_s, s.pitch, 0, p.K, mean, rstd);
  }
  __syncthreads();

  for (int64_t tile = blockIdx.x; tile < s.tiles; tile += gridDim.x) {
    if (threadIdx.x == 0 && tile + gridDim.x < s.tiles) prefetch_tile<bf16, true, kDual>(p, tile + gridDim.x, s.rows_per_tile);
    const int64_t n_lo = tile * s.rows_per_tile + group * 16 + g, n_hi = n_lo + 8;
    const bool live_lo = n_lo < p.N, live_hi = n_hi < p.N;
    float acc[kNT][4] = {}, acc2[kDual ? kNT : 1][4] = {};
    for (int64_t first = 0; first < p.K; first += s.chunk) {
      const int64_t count = std::min(s.chunk, p.K - first);
      if (!whole) {
        __syncthreads();  // the previous chunk's products are done with rows_s
        stage_chunk<NW>(p, rows_s, s.pitch, first, count, mean, rstd);
        __syncthreads();
      }
      const int64_t blocks = count / 32;
      const bf16* w_lo = weight + n_lo * p.K + first + 8 * quad;
      const bf16* w_hi = weight + n_hi * p.K + first + 8 * quad;
      const bf16* x_s = rows_s + g * s.pitch + 8 * quad;
      for (int64_t b0 = slice; b0 < blocks; b0 += split * kUnroll) {
        // Every weight load of the pass first, so they are in flight together.
        uint4 wl[kUnroll], wh[kUnroll], wl2[kDual ? kUnroll : 1], wh2[kDual ? kUnroll : 1];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t b = b0 + u * split;
          const bool in = b < blocks;
          wl[u] = load_weight(w_lo + 32 * b, in && live_lo);
          wh[u] = load_weight(w_hi + 32 * b, in && live_hi);
          if constexpr (kDual) {
            wl2[u] = load_weight(weight2 + (w_lo - weight) + 32 * b, in && live_lo);
            wh2[u] = load_weight(weight2 + (w_hi - weight) + 32 * b, in && live_hi);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t b = b0 + u * split;
          if (b >= blocks) break;
#pragma unroll
          for (int j = 0; j < kNT; ++j) {
            const uint4 xv = *reinterpret_cast<const uint4*>(x_s + 8 * j * s.pitch + 32 * b);
            mma_block(acc[j], wl[u], wh[u], xv);
            if constexpr (kDual) mma_block(acc2[j], wl2[u], wh2[u], xv);
          }
        }
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
      finish<bf16>(p, m, n, v, v2, load_epilogue<bf16>(p, m, n));
    }
    __syncthreads();  // the partial sums are rewritten by the next tile
  }
}

size_t fixed_shared_bytes(int rows, bool dual) {
  return (2 * kStatsRows + (dual ? 2 : 1) * kWarps * 16 * (rows + 1)) * sizeof(float);
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
  const int64_t room = static_cast<int64_t>(shared_limit()) - static_cast<int64_t>(fixed_shared_bytes(rows, dual));
  // The whole rows if they fit, else the fewest equal chunks that do.
  const int64_t most = std::max<int64_t>(32, (room / (rows * 2) - 32) / 32 * 32);
  const int64_t chunks = (p.K + most - 1) / most;
  s.chunk = pitch_for(p.K) * rows * 2 <= room ? p.K : ((p.K + chunks - 1) / chunks + 31) / 32 * 32;
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
  s.rows_per_tile = 16 * (kWarps / split);
  s.tiles = tiles_for(split);
  return s;
}

template <int kNT, bool kDual, typename NW>
void launch_typed(Params p, bool dependent) {
  static KernelFacts facts;
  constexpr int kRows = 8 * kNT;
  const MmaShape s = shape_for(p, kRows);
  const size_t shared = fixed_shared_bytes(kRows, kDual) + static_cast<size_t>(kRows * s.pitch) * sizeof(bf16);
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
