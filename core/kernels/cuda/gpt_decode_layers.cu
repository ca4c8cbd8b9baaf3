// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// GPT's decode step through all its blocks in one persistent kernel (gpt_decode_layers, decode_kernels.h).
//
// A step of a few rows is a chain of about eight small kernels a block (norm, q|k|v product, cache attention, output
// projection, norm, MLP products), each too small to fill the GPU: at 32 rows GPT-2 small's step spends about 0.5 ms
// in ~100 launches against ~0.1 ms of memory traffic. Here one CTA per multiprocessor runs every block of the model
// as five phases, each opened by a grid-wide barrier:
//
//   1. LN1 of the residual rows times the q|k|v weight (+ bias) -> qkv
//   2. the cache attention of every (row, head): append the new key and value, attend over the row's positions
//   3. the attention output times the projection (+ bias), added to the residual (each column has one owner CTA)
//   4. LN2 of the residual, times the MLP's first weight (+ bias), GELU -> hidden
//   5. hidden times the MLP's projection (+ bias), added to the residual
//
// The models take it at 4 to 16 rows (ops::gpt_decode_layers_applies), where an H200 runs it faster than the per-op
// fused step, whose launches overlap through programmatic dependent launch; at 1-2 rows and past 16 (rows padded to
// 32) the per-op step is faster. docs/benchmarks.md has the phase-by-phase times (RETORT_DECODE_LAYERS_PROFILE=1)
// and what was tried.
//
// The residual stream stays in float32 in global memory for the whole step (the per-op path rounds it to bf16 after
// every addition; this one rounds once, at the end), beside a bf16 copy that the norms read (half the bytes to stage,
// and the values the per-op path's norms see).
//
// The LayerNorms are folded into the products after them (NormedLinear: the norm's weight in the product's weight,
// its bias in a shift), so phases 1 and 4 stage the bf16 residual rows as a plain copy and apply each row's mean and
// 1/std in the epilogue. Those come from the phase that wrote the residual: each owner of 8 columns of a row writes
// their sum and their squared deviations from their own mean, and the reader merges a row's C / 8 pairs (the exact
// two-pass variance, by Chan's formula). Norming every row in every CTA cost 6 us a phase at 32 rows.
//
// Products (phases 1, 3, 4, 5): the CTA owns whole columns (groups of 8 outputs, the n of an mma.sync m16n8k16) and
// all rows; its 8 warps split the reduction (K) into 8 slices and add their sums through shared memory. Inside a
// 32-wide slice of K the mma's k order is permuted (thread t of a quad holds elements 8t..8t+7, the first four for
// one mma, the last four for the next) so that every operand is one 16-byte load, from global memory for the weight
// and from shared memory for the rows; the same permutation on both operands leaves each dot product unchanged. The
// weights do not depend on the step, so each CTA loads its share into registers before the barrier that opens the
// phase.
//
// The grid barrier is a counter in global memory (zeroed before the launch), added to by one thread a CTA with
// release semantics and read with acquire; the launch is cooperative, so every CTA is resident. Rows written in one
// phase and read in another are read with ld.global.cg or cp.async.cg (L2), never through a multiprocessor's L1.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/kernels/cuda/kernel_facts.cuh"
#include "core/kernels/cuda/ptx.cuh"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPad = 32;  // bf16 after each staged row: rows 64 bytes apart mod 128, conflict-free reads
constexpr int kHead = static_cast<int>(kDecodeLayersHead);
constexpr int kKeyUnroll = 8;  // keys each lane group has in flight

struct LayerPointers {
  const bf16* qkv_w;  // LN1 folded in (NormedLinear)
  const float* qkv_colsum;
  const float* qkv_shift;
  const bf16* proj_w;
  const bf16* proj_b;
  const bf16* fc_w;  // LN2 folded in
  const float* fc_colsum;
  const float* fc_shift;
  const bf16* out_w;
  const bf16* out_b;
  bf16* k_cache;  // [B, H, cap, kHead]
  bf16* v_cache;
};

// What every phase reads besides its layer's tensors, passed to the phases by value: read through a reference to the
// kernel's parameters, each field was a generic load, reloaded inside loops (it may alias the stores there).
struct Step {
  float* h;      // [B, C] the residual stream
  bf16* h16;     // [B, C] the same rounded to bf16: what the norms read (as the per-op path stores it)
  bf16* qkv;     // [B, 3C]
  bf16* attn;    // [B, C]
  bf16* hidden;  // [B, 4C]
  const int32_t* starts;
  int B, C, H, cap;
  float eps;
};

struct Args {
  LayerPointers layer[kDecodeLayersPerLaunch];
  int layers;
  Step step;
  const bf16* x_in;  // [B, C]
  bf16* x_out;       // [B, C]
  // [B, C / 8] for LN1 and LN2: the sum of each 8 columns of h16 and their squared deviations from their mean
  float2* ln1_parts;
  float2* ln2_parts;
  bool carried;  // h holds the residual of the launch before (layers past kDecodeLayersPerLaunch): x_in is not read
  unsigned* barrier;
  unsigned long long* timeline;  // null, or the crossings' time stamps (CTA 0's) and each phase's marks
};

// ---------------------------------------------------------------------------------------------------------------
// Grid barrier and loads of values other CTAs wrote.

constexpr int kMarkBase = 128;      // the timeline's marks follow its crossings
constexpr int kEmptyCrossings = 8;  // barriers with nothing between them, timed at the end of a profiled launch

struct GridBarrier {
  unsigned* counter;
  unsigned long long* timeline;
  unsigned target = 0;
  int crossings = 0;
  // The block's writes reach the other CTAs through the CTA barrier and thread 0's release (cumulative); thread 0's
  // acquire and the CTA barrier after it make theirs visible here.
  __device__ void sync() {
    __syncthreads();
    target += gridDim.x;
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      unsigned seen = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
      if (timeline != nullptr && blockIdx.x == 0) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %globaltimer;" : "=l"(now));
        timeline[crossings] = now;
      }
    }
    ++crossings;
    __syncthreads();
  }
  // Profiling only: the time at step k of the phase the last crossing opened (after the staging, after the work) of
  // the slowest CTA that had work (the clock only grows, so the maximum over this launch's CTAs is this launch's).
  __device__ void mark(int k) const {
    if (timeline != nullptr && threadIdx.x == 0) {
      unsigned long long now;
      asm volatile("mov.u64 %0, %globaltimer;" : "=l"(now));
      atomicMax(timeline + kMarkBase + 2 * (crossings - 1) + k, now);
    }
  }
};

// A 16-byte shared-memory load kept in program order with the products around it (volatile, as ptx::mma is), so
// that the compiler does not hoist every operand of a fully unrolled product loop ahead of the first product.
__device__ __forceinline__ uint4 shared_load(const bf16* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(ptx::smem_addr(p)));
  return v;
}

__device__ __forceinline__ uint4 load_shared_rows(const bf16* p) {
  return __ldcg(reinterpret_cast<const uint4*>(p));
}

// The slice [total * part / parts, total * (part + 1) / parts) of `total` items.
__device__ __forceinline__ int2 share(int total, int part, int parts) {
  return make_int2(static_cast<int>(static_cast<int64_t>(total) * part / parts),
                   static_cast<int>(static_cast<int64_t>(total) * (part + 1) / parts));
}

// ---------------------------------------------------------------------------------------------------------------
// Staging the rows of a product in shared memory: kRows rows of K bf16, kPad apart; rows past B are zero.

// `rows` rows of `chunks` 16-byte pieces from global memory (L2: other CTAs wrote them) into shared memory, every
// copy in flight at once; rows from `live` on are zero-filled. (r, c) walks the pieces kThreads apart without a
// division a piece.
__device__ __forceinline__ void issue_row_copies(void* dst, int dst_stride, const void* src, int src_stride, int rows,
                                                 int live, int chunks) {
  int r = threadIdx.x / chunks, c = threadIdx.x - r * chunks;
  const int row_step = kThreads / chunks, chunk_step = kThreads - row_step * chunks;
  const uint32_t base = ptx::smem_addr(dst);
  while (r < rows) {
    const bool valid = r < live;
    ptx::cp_async16(base + r * dst_stride + 16 * c,
                    static_cast<const char*>(src) + static_cast<int64_t>(valid ? r : 0) * src_stride + 16 * c, valid);
    r += row_step;
    c += chunk_step;
    if (c >= chunks) c -= chunks, ++r;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// One product phase: out columns [8 u0, 8 u0 + 8 units) of rows x W^T, W [N, K], the staged rows in shared memory.
//
// K = kSplits C (1, or 4 for the MLP's projection). A warp multiplies its eighth of each C-wide split of K, in
// 32-wide pieces; a slot is one (unit, split) pair, so a pass holds kMaxSlots / kSplits units. The weight pieces of a
// pass are loaded into registers before the grid barrier that opens the phase: they do not depend on the step.

enum class Epilogue { Store, Residual, Gelu };

struct Product {
  const bf16* w;
  const bf16* bias;     // plain products (may be null)
  const float* colsum;  // folded products (NormedLinear; stats_in set): the sums of W' and the shift
  const float* shift;
  const float2* stats_in;  // folded products: the residual's per-8-column pairs, [B, C / 8]
  float2* stats_out;       // Residual: where this phase's pairs go, for the next norm
  int K, N;
  Epilogue epilogue;
  bf16* out;  // Store / Gelu: [B, N]
};

constexpr int kMaxSlots = 4;
constexpr int kMaxChunks = 4;   // 32-wide pieces of a warp's eighth of C (C <= 1024)
constexpr int kMaxOutputs = 4;  // outputs a thread finishes in a pass: 32 rows x 32 columns over kThreads

// A pass's weights, in registers.
struct WeightTile {
  uint4 w[kMaxSlots][kMaxChunks];
};

// A pass's per-column constants (the fold's shift and column sums, or the bias), in shared memory past the staged rows
// and the row statistics. Copied asynchronously, so the registers stay with the weights.
struct ColumnConstants {
  float shift[kMaxSlots * 8], colsum[kMaxSlots * 8];
  bf16 bias[kMaxSlots * 8];
};

// Issued by warp 1 (warp 0's release at the barrier must not wait on copies); waited for with the staged rows.
__device__ void load_constants(const Product& p, int u0, int units, ColumnConstants& c) {
  const int i = threadIdx.x - 32, cols = units * 8;
  if (i < 0 || i >= 32) return;
  if (p.stats_in != nullptr) {
    if (i < cols / 4)
      ptx::cp_async16(ptx::smem_addr(c.shift + 4 * i), p.shift + 8 * u0 + 4 * i, true);
    else if (i < cols / 2)
      ptx::cp_async16(ptx::smem_addr(c.colsum + 4 * (i - cols / 4)), p.colsum + 8 * u0 + 4 * (i - cols / 4), true);
  } else if (p.bias != nullptr && i < cols / 8) {
    ptx::cp_async16(ptx::smem_addr(c.bias + 8 * i), p.bias + 8 * u0 + 8 * i, true);
  }
  ptx::cp_async_commit();
}

template <int kSplits>
__device__ void load_weights(const Product& p, int C, int u0, int units, WeightTile& t) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4, chunks = C / 256;
  const bf16* base = p.w + static_cast<int64_t>(8 * u0 + g) * p.K + warp * (C / 8) + 8 * t4;
#pragma unroll
  for (int s = 0; s < kMaxSlots; ++s) {
    const int unit = s / kSplits, split = s % kSplits;
    if (unit < units)
#pragma unroll
      for (int c = 0; c < kMaxChunks; ++c)
        if (c < chunks)
          t.w[s][c] =
              __ldg(reinterpret_cast<const uint4*>(base + static_cast<int64_t>(8 * unit) * p.K + split * C + 32 * c));
  }
}

// The 8 lanes of an output group (8 columns of one row) reduce their values to the group's sum and squared deviations
// from its mean. Every lane of the warp takes part.
__device__ __forceinline__ float2 group_pair(float x) {
  float sum = x;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sum += __shfl_xor_sync(0xffffffffu, sum, 4);
  const float d = x - sum * 0.125f;
  float m2 = d * d;
  m2 += __shfl_xor_sync(0xffffffffu, m2, 1);
  m2 += __shfl_xor_sync(0xffffffffu, m2, 2);
  m2 += __shfl_xor_sync(0xffffffffu, m2, 4);
  return make_float2(sum, m2);
}

template <int kRows, int kSplits>
__device__ void multiply(const Step& a, const Product& p, const bf16* rows, float* sums, const float2* stats,
                         const ColumnConstants& consts, int u0, int units, const WeightTile& t) {
  constexpr int kMT = kRows / 16, kUnits = kMaxSlots / kSplits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4, C = a.C;
  const int lda = p.K + kPad, chunks = C / 256, cols = units * 8;
  // The residual values this thread adds to, loaded while the products run.
  float residual[kMaxOutputs];
  if (p.epilogue == Epilogue::Residual)
#pragma unroll
    for (int k = 0; k < kMaxOutputs; ++k) {
      const int i = threadIdx.x + k * kThreads, r = i / cols, col = i - r * cols;
      residual[k] = i < a.B * cols ? __ldcg(a.h + static_cast<int64_t>(r) * p.N + 8 * u0 + col) : 0.f;
    }
  float acc[kUnits][kMT][4];
#pragma unroll
  for (int u = 0; u < kUnits; ++u)
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[u][m][e] = 0.f;
  const bf16* arow = rows + g * lda + warp * (C / 8) + 8 * t4;
#pragma unroll
  for (int s = 0; s < kMaxSlots; ++s) {
    const int unit = s / kSplits, split = s % kSplits;
    if (unit >= units) continue;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      if (c >= chunks) continue;
#pragma unroll
      for (int m = 0; m < kMT; ++m) {
        const bf16* at = arow + 16 * m * lda + split * C + 32 * c;
        const uint4 lo = shared_load(at), hi = shared_load(at + 8 * lda);
        const uint32_t frag0[4] = {lo.x, hi.x, lo.y, hi.y}, frag1[4] = {lo.z, hi.z, lo.w, hi.w};
        ptx::mma(acc[unit][m], frag0, t.w[s][c].x, t.w[s][c].y);
        ptx::mma(acc[unit][m], frag1, t.w[s][c].z, t.w[s][c].w);
      }
    }
  }
  // The warps' sums of their K slices, [warp][row][column], then one thread an output adds them.
#pragma unroll
  for (int u = 0; u < kUnits; ++u)
#pragma unroll
    for (int m = 0; m < kMT; ++m)
      if (u < units) {
        float* at = sums + (warp * kRows + 16 * m + g) * cols + 8 * u + 2 * t4;
        at[0] = acc[u][m][0];
        at[1] = acc[u][m][1];
        at[8 * cols] = acc[u][m][2];
        at[8 * cols + 1] = acc[u][m][3];
      }
  ptx::cp_async_wait<0>();  // the column constants of a pass after the first
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMaxOutputs; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i - lane >= a.B * cols) break;  // the same for the whole warp (its shuffles below need every lane)
    const bool live = i < a.B * cols;   // whole groups of 8 lanes: cols is a multiple of 8
    const int r = live ? i / cols : 0, col = live ? i - r * cols : 0, n = 8 * u0 + col;
    float v = 0.f;
    if (live)
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += sums[(w * kRows + r) * cols + col];
    if (p.stats_in != nullptr)
      v = stats[r].y * (v - stats[r].x * consts.colsum[col]) + consts.shift[col];
    else if (p.bias != nullptr)
      v += __bfloat162float(consts.bias[col]);
    const int64_t at = static_cast<int64_t>(r) * p.N + n;
    switch (p.epilogue) {
      case Epilogue::Store:
        if (live) p.out[at] = __float2bfloat16(v);
        break;
      case Epilogue::Gelu:
        if (live) p.out[at] = __float2bfloat16(gelu_tanh(v));
        break;
      case Epilogue::Residual: {
        // This CTA alone owns column n in this phase; its groups of 8 columns give the next norm its pairs.
        const float sum = residual[k] + v;
        const bf16 stored = __float2bfloat16(sum);
        const float2 pair = group_pair(live ? __bfloat162float(stored) : 0.f);
        if (live) {
          __stcg(a.h + at, sum);
          a.h16[at] = stored;
          if (col % 8 == 0) p.stats_out[r * (p.N / 8) + n / 8] = pair;
        }
        break;
      }
    }
  }
  __syncthreads();
}

// Each row's mean and 1/std from the C / 8 pairs (sum, squared deviations) of its columns' owners, into `stats`:
// warp w merges rows w, w + kWarps, ...; with C a multiple of 256 each lane holds C / 256 pairs of a row.
template <int kRows>
__device__ void row_stats(const Step& a, const float2* parts, float2* stats) {
  constexpr int kPerWarp = kRows / kWarps;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, units = a.C / 8, per_lane = a.C / 256;
  float2 v[kPerWarp][kMaxChunks];  // every load in flight at once: one round trip
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j)
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int r = warp + kWarps * j;
      v[j][c] = r < a.B && c < per_lane ? __ldcg(parts + r * units + lane + 32 * c) : make_float2(0.f, 0.f);
    }
  const float inv = 1.f / static_cast<float>(a.C);
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) sum += v[j][c].x;
    const float mean = warp_sum(sum) * inv;
    float m2 = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c)
      if (c < per_lane) {
        const float d = v[j][c].x * 0.125f - mean;
        m2 += v[j][c].y + 8.f * d * d;
      }
    m2 = warp_sum(m2);
    if (lane == 0) stats[warp + kWarps * j] = make_float2(mean, rsqrtf(m2 * inv + a.eps));
  }
}

// The CTA's columns of one product: the first pass's weights loaded, the grid barrier (the rows are then written),
// the rows staged (the residual rows as stored for a folded norm, with their means and 1/std), then the passes. Not
// inlined, as the attention phase: each phase gets the registers on its own instead of the whole layer's code
// competing for them in one allocation.
template <int kRows, int kSplits>
__device__ __noinline__ void product_phase(const Step a, const Product p, const bf16* src, bf16* rows,
                                           GridBarrier& barrier) {
  constexpr int kUnits = kMaxSlots / kSplits;
  const int2 mine = share(p.N / 8, blockIdx.x, gridDim.x);
  int u0 = mine.x, units = min(kUnits, mine.y - u0);
  WeightTile t;
  // Warp 0 loads its weights after the barrier: its thread 0 arrives with a release, which would wait for them.
  const bool first_warp = threadIdx.x < 32;
  float* sums = reinterpret_cast<float*>(rows + kRows * (p.K + kPad));
  float2* stats = reinterpret_cast<float2*>(sums + kWarps * kRows * kMaxSlots * 8);
  ColumnConstants& consts = *reinterpret_cast<ColumnConstants*>(stats + kRows);
  if (units > 0 && !first_warp) {
    load_weights<kSplits>(p, a.C, u0, units, t);
    load_constants(p, u0, units, consts);
  }
  barrier.sync();
  if (units <= 0) return;
  if (first_warp) load_weights<kSplits>(p, a.C, u0, units, t);
  issue_row_copies(rows, (p.K + kPad) * 2, src, p.K * 2, kRows, a.B, p.K / 8);
  ptx::cp_async_commit();
  if (p.stats_in != nullptr) row_stats<kRows>(a, p.stats_in, stats);
  ptx::cp_async_wait<0>();
  __syncthreads();
  barrier.mark(0);
  for (;;) {
    multiply<kRows, kSplits>(a, p, rows, sums, stats, consts, u0, units, t);
    u0 += units;
    if (u0 >= mine.y) break;
    units = min(kUnits, mine.y - u0);
    load_weights<kSplits>(p, a.C, u0, units, t);
    load_constants(p, u0, units, consts);
  }
  barrier.mark(1);
}

// ---------------------------------------------------------------------------------------------------------------
// The cache attention. A CTA takes its (row, head) items kWarps at a time, all at once: warp w works for item
// w % n of the n, with the other warps of that item splitting its keys. Lanes form groups of 8, a group reads one key
// of 64 bf16 (a 16-byte vector a lane), kKeyUnroll keys in flight a group; online softmax per group, merged over the
// warp by shuffles and over the item's warps in shared memory. The cached keys and values do not depend on the step:
// the first batch of them is loaded before the grid barrier that opens the phase, as the products' weights are.

struct AttendScratch {
  float m[kWarps], l[kWarps];
  float acc[kWarps][kHead];
};

// One round's item for this warp: which (row, head), where its keys are, and how the item's warps split them.
struct AttendItem {
  int n, rank, team, b, h, start, seen, cached;  // cached: the positions before start that the cache holds
  int64_t head;                                  // the item's first cached element
  // The row's start comes from the caller: the first round's is read once a launch, before the layers (read here, it
  // held the warp a round trip before it could issue the loads ahead of the barrier).
  __device__ AttendItem(const Step& a, int first, int row_start) {
    const int warp = threadIdx.x / 32, G = gridDim.x;
    n = min(kWarps, (a.B * a.H - first + G - 1) / G);  // items this round
    const int mine = warp % n;
    rank = warp / n;
    team = (kWarps - mine + n - 1) / n;  // warps on item `mine`
    const int item = first + mine * G;
    b = item / a.H;
    h = item - b * a.H;
    start = row_start;
    seen = min(start + 1, a.cap);
    cached = min(start, a.cap);
    head = (static_cast<int64_t>(b) * a.H + h) * a.cap * kHead;
  }
  // The row of this warp's item in the round that starts at item `first`.
  __device__ static int row_of(const Step& a, int first) {
    const int warp = threadIdx.x / 32, G = gridDim.x;
    const int n = min(kWarps, (a.B * a.H - first + G - 1) / G);
    return (first + warp % n * G) / a.H;
  }
  __device__ int first_key() const { return rank * 4 + threadIdx.x % 32 / 8; }
  __device__ int stride() const { return team * 4; }  // keys the item's warps cover in one unroll step
};

// The cached keys and values (positions before `start`) of one unroll step from `base`.
__device__ __forceinline__ void load_cached(const LayerPointers& L, const AttendItem& it, int base,
                                            uint4 (&kv)[kKeyUnroll], uint4 (&vv)[kKeyUnroll]) {
  const int gl = threadIdx.x % 8;
#pragma unroll
  for (int u = 0; u < kKeyUnroll; ++u) {
    const int j = base + u * it.stride();
    if (j < it.cached) {
      const int64_t at = it.head + static_cast<int64_t>(j) * kHead + 8 * gl;
      kv[u] = __ldg(reinterpret_cast<const uint4*>(L.k_cache + at));
      vv[u] = __ldg(reinterpret_cast<const uint4*>(L.v_cache + at));
    }
  }
}

__device__ __noinline__ void attention_phase(const Step a, const LayerPointers L, int first_start, AttendScratch& s,
                                             GridBarrier& barrier) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gl = lane % 8;
  const int C = a.C, H = a.H, items = a.B * H, G = gridDim.x;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale = rsqrtf(static_cast<float>(kHead)) * kLog2e;
  uint4 kv[kKeyUnroll], vv[kKeyUnroll];
  // Warp 0 loads after the barrier, as in product_phase.
  const bool early = blockIdx.x < items && warp > 0;
  if (early) {
    const AttendItem it(a, blockIdx.x, first_start);
    load_cached(L, it, it.first_key(), kv, vv);
  }
  barrier.sync();
  for (int first = blockIdx.x; first < items; first += kWarps * G) {
    const AttendItem it(a, first, first == blockIdx.x ? first_start : a.starts[AttendItem::row_of(a, first)]);
    const int n = it.n, rank = it.rank, b = it.b, h = it.h, start = it.start, seen = it.seen, stride = it.stride();
    const bf16* q_row = a.qkv + static_cast<int64_t>(b) * 3 * C + h * kHead;
    const bf16* k_new = q_row + C;
    const bf16* v_new = q_row + 2 * C;
    if (start < a.cap && rank == 0 && lane < 16) {  // the append, by the item's first warp
      const int part = lane % 8;
      const bf16* from = lane < 8 ? k_new : v_new;
      bf16* to = (lane < 8 ? L.k_cache : L.v_cache) + it.head + static_cast<int64_t>(start) * kHead;
      *reinterpret_cast<uint4*>(to + 8 * part) = load_shared_rows(from + 8 * part);
    }
    float q[8];
    {
      const uint4 raw = load_shared_rows(q_row + 8 * gl);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[i] = __bfloat162float(e[i]) * scale;
    }
    float m = -INFINITY, l = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    bool loaded = early && first == blockIdx.x;
    for (int base = it.first_key(); base - it.first_key() < seen; base += stride * kKeyUnroll) {
      if (!loaded) load_cached(L, it, base, kv, vv);
      loaded = false;
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const int j = base + u * stride;
        if (j >= it.cached) {  // the new key (this step's q|k|v), or past the row's positions
          if (j < seen) {
            kv[u] = load_shared_rows(k_new + 8 * gl);
            vv[u] = load_shared_rows(v_new + 8 * gl);
          } else {
            kv[u] = make_uint4(0, 0, 0, 0);
            vv[u] = kv[u];
          }
        }
      }
      // The batch's scores first, then one rescale for all of them: the online softmax's chain of dependent
      // exponentials and rescales is one step a batch instead of one a key.
      float dots[kKeyUnroll];
      float top = m;
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const bf16* ke = reinterpret_cast<const bf16*>(&kv[u]);
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += q[i] * __bfloat162float(ke[i]);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        dot += __shfl_xor_sync(0xffffffffu, dot, 4);
        dots[u] = base + u * stride < seen ? dot : -INFINITY;
        top = fmaxf(top, dots[u]);
      }
      if (top == -INFINITY) continue;  // none of this group's keys is a position of the row
      const float rescale = exp2f(m - top);
      l *= rescale;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] *= rescale;
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const float p = exp2f(dots[u] - top);
        const bf16* ve = reinterpret_cast<const bf16*>(&vv[u]);
        l += p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += p * __bfloat162float(ve[i]);
      }
      m = top;
    }
    // Merge the warp's four groups: lanes 8 and 16 apart hold the same head elements.
#pragma unroll
    for (int o = 8; o < 32; o <<= 1) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m, o), l_o = __shfl_xor_sync(0xffffffffu, l, o);
      const float top = fmaxf(m, m_o);
      const float f = m == -INFINITY ? 0.f : exp2f(m - top), f_o = m_o == -INFINITY ? 0.f : exp2f(m_o - top);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = acc[i] * f + __shfl_xor_sync(0xffffffffu, acc[i], o) * f_o;
      l = l * f + l_o * f_o;
      m = top;
    }
    if (lane == 0) s.m[warp] = m, s.l[warp] = l;
    if (lane < 8)
#pragma unroll
      for (int i = 0; i < 8; ++i) s.acc[warp][8 * gl + i] = acc[i];
    __syncthreads();
    // Item k's warps are k, k + n, ...: thread t finishes element t % 64 of item t / 64.
    for (int t = threadIdx.x; t < n * kHead; t += kThreads) {
      const int k = t / kHead, d = t - k * kHead, it = first + k * G, ib = it / H, ih = it - ib * H;
      float top = -INFINITY;
      for (int w = k; w < kWarps; w += n) top = fmaxf(top, s.m[w]);
      float total = 0.f, sum = 0.f;
      for (int w = k; w < kWarps; w += n) {
        const float f = s.m[w] == -INFINITY ? 0.f : exp2f(s.m[w] - top);
        total += s.l[w] * f;
        sum += s.acc[w][d] * f;
      }
      a.attn[static_cast<int64_t>(ib) * C + ih * kHead + d] = __float2bfloat16(sum / total);
    }
    __syncthreads();
  }
}

template <int kRows>
__global__ void __launch_bounds__(kThreads, 1) gpt_decode_layers_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* rows = reinterpret_cast<bf16*>(smem);
  AttendScratch& scratch = *reinterpret_cast<AttendScratch*>(smem);
  GridBarrier barrier{a.barrier, a.timeline};
  const Step st = a.step;
  const int C = st.C;
  const int64_t n = static_cast<int64_t>(st.B) * C;
  if (!a.carried) {
    // The input rows into the residual, with LN1's pairs of every 8 columns (a launch that carries the residual
    // of the one before finds that launch's pairs in place).
    const int units = C / 8;
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < st.B * units; i += gridDim.x * kThreads) {
      const int64_t at = static_cast<int64_t>(i) * 8;
      const uint4 raw = *reinterpret_cast<const uint4*>(a.x_in + at);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
      float v[8], sum = 0.f, m2 = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) sum += v[k] = __bfloat162float(e[k]);
#pragma unroll
      for (int k = 0; k < 8; ++k) m2 += (v[k] - sum * 0.125f) * (v[k] - sum * 0.125f);
      *reinterpret_cast<float4*>(st.h + at) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(st.h + at + 4) = make_float4(v[4], v[5], v[6], v[7]);
      *reinterpret_cast<uint4*>(st.h16 + at) = raw;
      a.ln1_parts[i] = make_float2(sum, m2);
    }
  }
  // Where the row of this warp's first attention item starts: the same in every layer.
  const int first_start = blockIdx.x < st.B * st.H ? st.starts[AttendItem::row_of(st, blockIdx.x)] : 0;
  for (int l = 0; l < a.layers; ++l) {
    const LayerPointers& L = a.layer[l];
    // Each product phase opens with the grid barrier after the phase before (its rows are then written).
    product_phase<kRows, 1>(
        st,
        Product{L.qkv_w, nullptr, L.qkv_colsum, L.qkv_shift, a.ln1_parts, nullptr, C, 3 * C, Epilogue::Store, st.qkv},
        st.h16, rows, barrier);
    attention_phase(st, L, first_start, scratch, barrier);
    barrier.mark(1);
    product_phase<kRows, 1>(
        st, Product{L.proj_w, L.proj_b, nullptr, nullptr, nullptr, a.ln2_parts, C, C, Epilogue::Residual, nullptr},
        st.attn, rows, barrier);
    product_phase<kRows, 1>(
        st,
        Product{L.fc_w, nullptr, L.fc_colsum, L.fc_shift, a.ln2_parts, nullptr, C, 4 * C, Epilogue::Gelu, st.hidden},
        st.h16, rows, barrier);
    product_phase<kRows, 4>(
        st, Product{L.out_w, L.out_b, nullptr, nullptr, nullptr, a.ln1_parts, 4 * C, C, Epilogue::Residual, nullptr},
        st.hidden, rows, barrier);
  }
  barrier.sync();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    a.x_out[i] = __float2bfloat16(__ldcg(st.h + i));
  if (a.timeline != nullptr)
    for (int i = 0; i < kEmptyCrossings; ++i) barrier.sync();
}

// Shared memory of a launch: the staged rows of the widest product (the MLP's projection, K = 4C) and the warps'
// sums beside them, or the attention's scratch.
size_t shared_bytes(int rows, int64_t C) {
  const size_t staged = static_cast<size_t>(rows) * static_cast<size_t>(4 * C + kPad) * sizeof(bf16);
  const size_t sums = static_cast<size_t>(kWarps) * rows * kMaxSlots * 8 * sizeof(float);
  const size_t stats = static_cast<size_t>(rows) * sizeof(float2);
  return std::max(staged + sums + stats + sizeof(ColumnConstants), sizeof(AttendScratch));
}

int padded_rows(int64_t rows) {
  return rows <= 16 ? 16 : 32;
}

// RETORT_DECODE_LAYERS_PROFILE=1: eager launches wait for the kernel and add its phase times to a table printed at
// exit (a JSON line on stderr), for the benchmarks' breakdown. Graph captures are never profiled.
struct PhaseProfile {
  std::mutex mutex;
  // Summed over steps, per phase (layer l's q|k|v product is phase 5 l, then its attention, projection, first MLP
  // product and MLP projection; layers past a launch's kDecodeLayersPerLaunch continue the count): from the crossing
  // that opens it to the next one, and to the slowest CTA's marks after its staging and after its work.
  std::vector<double> us, staged_us, worked_us;
  double empty_us = 0;
  int64_t steps = 0;
  unsigned long long* device = nullptr;
  static PhaseProfile& get() {
    static PhaseProfile* profile = [] {
      auto* p = new PhaseProfile;
      std::atexit([] { get().print(); });
      return p;
    }();
    return *profile;
  }
  // One launch's stamps; its first phase is phase `offset` of the step.
  void record(const std::vector<unsigned long long>& t, int crossings, int empty, size_t offset) {
    const size_t phases = static_cast<size_t>(crossings - 1);
    if (us.size() < offset + phases)
      us.resize(offset + phases, 0.0), staged_us.resize(offset + phases, 0.0), worked_us.resize(offset + phases, 0.0);
    const auto since = [&](unsigned long long later, unsigned long long earlier) {
      return later > earlier ? (later - earlier) / 1000.0 : 0.0;
    };
    for (size_t i = 0; i < phases; ++i) {
      us[offset + i] += since(t[i + 1], t[i]);
      staged_us[offset + i] += since(t[kMarkBase + 2 * i], t[i]);
      worked_us[offset + i] += since(t[kMarkBase + 2 * i + 1], t[i]);
    }
    if (offset > 0) return;  // one step: the first launch's empty barriers
    empty_us += since(t[static_cast<size_t>(crossings + empty - 1)], t[static_cast<size_t>(crossings - 1)]) / empty;
    ++steps;
  }
  void print() {
    if (steps == 0) return;
    const auto list = [&](const std::vector<double>& v) {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + fmt::format("{:.3f}", v[i] / steps);
      return out + "]";
    };
    const std::string line = fmt::format(
        "{{\"gpt_decode_layers_phase_us\": {}, \"staged_us\": {}, \"worked_us\": {}, \"empty_barrier_us\": {:.3f}, "
        "\"steps\": {}}}\n",
        list(us), list(staged_us), list(worked_us), empty_us / steps, steps);
    std::fputs(line.c_str(), stderr);
  }
};

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("RETORT_DECODE_LAYERS_PROFILE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

bool gpt_decode_layers_shared_fits(int64_t rows, int64_t width) {
  const int device = rc::current_device();
  return shared_bytes(padded_rows(rows), width) <= rc::device_properties(device).sharedMemPerBlockOptin;
}

void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out) {
  rc::DeviceGuard guard(device_of(x, "gpt_decode_layers"));
  const int64_t B = x.size(0), C = x.size(1);
  // Rows, weights, biases and the folds' vectors are read 16 bytes at a time.
  check(aligned16(x.raw_data()),
        "gpt_decode_layers (CUDA): x {} must start on a 16-byte boundary (a fresh tensor does)", x.describe());
  for (const GptDecodeLayer& l : layers)
    for (const Tensor* t : {&l.qkv.weight, &l.qkv.colsum, &l.qkv.shift, &l.proj_weight, &l.proj_bias, &l.fc.weight,
                            &l.fc.colsum, &l.fc.shift, &l.out_weight, &l.out_bias})
      check(!t->defined() || aligned16(t->raw_data()),
            "gpt_decode_layers (CUDA): {} must start on a 16-byte boundary (a fresh tensor does)", t->describe());
  const int rows = padded_rows(B);
  const size_t shared = shared_bytes(rows, C);
  const auto kernel = rows == 16 ? &gpt_decode_layers_kernel<16> : &gpt_decode_layers_kernel<32>;
  // The shared memory limit raised once a device (gpt_decode_layers_fits has checked that a CTA fits); one resident
  // CTA a multiprocessor is the cooperative launch's grid.
  static KernelFacts facts16, facts32;
  blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, shared, rows == 16 ? facts16 : facts32);
  const int grid = sm_count();

  // The workspace: the residual rows (f32), the two norms' pairs (C / 8 float2 a row each), q|k|v, the attention
  // output, the MLP's hidden rows and the residual rows rounded (bf16), and the barrier's counter.
  Tensor workspace = Tensor::empty({B * C + B * C / 2 + B * 9 * C / 2 + 4}, DType::F32, x.device());  // in 4-byte words
  char* base = static_cast<char*>(workspace.raw_data());
  Args a{};
  a.step.h = reinterpret_cast<float*>(base);
  a.ln1_parts = reinterpret_cast<float2*>(base + B * C * 4);
  a.ln2_parts = a.ln1_parts + B * C / 8;
  a.step.qkv = reinterpret_cast<bf16*>(a.ln2_parts + B * C / 8);
  a.step.attn = a.step.qkv + B * 3 * C;
  a.step.hidden = a.step.attn + B * C;
  a.step.h16 = a.step.hidden + B * 4 * C;
  a.barrier = reinterpret_cast<unsigned*>(a.step.h16 + B * C);
  a.x_in = x.data<bf16>();
  a.x_out = out.data<bf16>();
  a.step.starts = starts.data<int32_t>();
  a.step.B = static_cast<int>(B);
  a.step.C = static_cast<int>(C);
  a.step.H = n_head;
  a.step.cap = static_cast<int>(layers.front().k_cache.size(2));
  a.step.eps = eps;

  PhaseProfile* profile = profiling() && !rc::stream_capturing() ? &PhaseProfile::get() : nullptr;
  constexpr int kStamps = kMarkBase + 2 * kMarkBase;
  if (profile != nullptr && profile->device == nullptr)
    RETORT_CUDA_CHECK(cudaMalloc(&profile->device, sizeof(unsigned long long) * kStamps));

  const auto weights = [](const Tensor& t) -> const bf16* { return t.defined() ? t.data<bf16>() : nullptr; };
  for (size_t first = 0; first < layers.size(); first += kDecodeLayersPerLaunch) {
    const size_t count = std::min(layers.size() - first, static_cast<size_t>(kDecodeLayersPerLaunch));
    a.layers = static_cast<int>(count);
    for (size_t i = 0; i < count; ++i) {
      const GptDecodeLayer& l = layers[first + i];
      a.layer[i] = LayerPointers{l.qkv.weight.data<bf16>(), l.qkv.colsum.data<float>(), l.qkv.shift.data<float>(),
                                 weights(l.proj_weight),    weights(l.proj_bias),       l.fc.weight.data<bf16>(),
                                 l.fc.colsum.data<float>(), l.fc.shift.data<float>(),   weights(l.out_weight),
                                 weights(l.out_bias),       l.k_cache.data<bf16>(),     l.v_cache.data<bf16>()};
    }
    // Launches after the first go on from the float32 residual the one before left in the workspace.
    a.carried = first > 0;
    a.timeline = profile != nullptr ? profile->device : nullptr;
    RETORT_CUDA_CHECK(cudaMemsetAsync(a.barrier, 0, sizeof(unsigned), rc::current_stream()));
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = shared;
    config.stream = rc::current_stream();
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeCooperative;
    attribute[0].val.cooperative = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    RETORT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
    RETORT_CUDA_CHECK_LAUNCH();
    if (profile != nullptr) {
      const int crossings = 1 + 5 * static_cast<int>(count) + kEmptyCrossings;
      std::vector<unsigned long long> stamps(kStamps);
      RETORT_CUDA_CHECK(cudaMemcpyAsync(stamps.data(), profile->device, sizeof(unsigned long long) * kStamps,
                                        cudaMemcpyDeviceToHost, rc::current_stream()));
      RETORT_CUDA_CHECK(cudaStreamSynchronize(rc::current_stream()));
      std::lock_guard<std::mutex> lock(profile->mutex);
      profile->record(stamps, crossings - kEmptyCrossings, kEmptyCrossings, 5 * first);
    }
  }
}

}  // namespace retort::kernels::cuda
