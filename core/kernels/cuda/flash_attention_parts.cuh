#pragma once
// What the fused attention's two forward kernels (mma.sync in flash_attention.cu, wgmma in
// flash_attention_wgmma.cu) and its backward share: the arguments (and the wgmma kernels' tensor maps), fragment
// packing, quad reductions, the dQ accumulator's layouts and the backward's walk.
#include <cuda.h>  // CUtensorMap (a type only: nothing links the driver library)
#include <cuda_bf16.h>

#include <cstdint>

#include "core/kernels/cuda/ptx.cuh"

namespace retort::kernels::cuda::flash {

using bf16 = __nv_bfloat16;
using ptx::pack_bf16;
using ptx::quad_max;
using ptx::quad_sum;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct ForwardArgs {
  const bf16 *q, *k, *v;
  int64_t q_stride, k_stride, v_stride;
  bf16* out;
  int64_t out_stride;
  float* lse;  // [B, H, T]
  int T, H, group;
  float scale_log2;  // log2(e) / sqrt(D): scores in base 2
  // The wgmma kernels' order of their work items (query tile, head, batch; forward_item): the query tile slowest
  // so that every head's longest tiles start before any head's shorter ones; else (false) the tile fastest (why:
  // below).
  bool longest_first = true;
  // Longest first within chunks of this many (batch, key/value head) pairs, one chunk after another (0: one chunk of
  // every pair), so that the CTAs running at once read the keys and values of few heads: with every head's longest
  // tiles first across all pairs, 4 x 4096 x 32 x 8 x 128's forward read 1.2 GB from DRAM for its 0.34 GB of
  // operands (its keys and values, 67 MB, did not stay in the L2); in chunks, 0.2 GB.
  int pairs_per_chunk = 0;
  int B = 1;  // batches (the wgmma kernels count their items)
};

// Why the wgmma kernels order their grids by work: a CTA's work grows with its distance from the start of the sequence
// (causal), and CTAs start in grid order as multiprocessors free up. With the tile fastest, each (batch, head)'s
// longest CTA starts only after the previous heads' short ones, and the last heads' long CTAs run alone at the end: a
// list schedule of the 1,024 backward CTAs of 4 x 4096 x 32 x 8 x 128 on 132 multiprocessors ends 14% after the
// ideal. The forward takes the longest first across every head and batch. The backward does so within chunks of about
// a wave of CTAs (BackwardArgs::chunk): across the whole grid, the CTAs of one key/value head would run waves apart,
// and the dQ rows and the Q and dO tiles they share would leave the L2 between them (docs/benchmarks.md).

// The forward's operands as TMA tensor maps (Q [B, T, H D], K and V [B, T, KV D] in their row strides, boxes of 64
// columns by a tile's rows, 128-byte swizzle), for the kernel that loads them with the copy engine; unused (zeros) by
// the others.
struct ForwardMaps {
  CUtensorMap q, k, v;
};

// The backward's operands as TMA tensor maps for the kernel that loads them with the copy engine (unused, zeros, by the
// others): Q and dO [B, T, H D], K and V [B, T, KV D] in their row strides, boxes of 64 columns by a tile's rows with
// the 128-byte swizzle; lse and Dvec [B H, T] float32, boxes of a tile's rows.
struct BackwardMaps {
  CUtensorMap q, dout, k, v, lse, dvec;
};

// The order in which the pipelined backward's CTAs walk their query tiles (BackwardArgs::walk).
//   FromDiagonal: a query head's tiles from the one holding the first key's diagonal to the last, head after head.
//   FromEnd: the tiles from the last back to the diagonal's, every head of the group on each tile (starting at a head
//     rotated by the key tile) before the next. The CTAs of one key/value head start together on the same query rows
//     and move through them at the same pace, so the dQ rows they add into and the Q and dO tiles they read at a time
//     are few: at 4 x 4096 x 32 x 8 x 128 on an H200 the kernel reads 0.61 GB from DRAM instead of 0.91 and runs
//     1-4% faster (docs/benchmarks.md).
enum class BackwardOrder : int { FromDiagonal = 0, FromEnd = 1, FromEndAligned = 2 };

struct BackwardArgs {
  const bf16 *q, *k, *v, *dout;
  int64_t q_stride, k_stride, v_stride, dout_stride;
  const float *lse, *dvec;  // [B, H, T]
  float* dq;                // float32 accumulator, zeroed: [B, T, H, D], or as DqLayout says
  bf16 *dk, *dv;
  int64_t dk_stride, dv_stride;
  int T, H, group;
  float scale_log2, scale;
  BackwardOrder walk = BackwardOrder::FromEnd;  // the pipelined kernels' (the others walk from the diagonal)
  // The grid's order (backward_block): 0, the key tile fastest (blockIdx.x; key/value heads y, batches z); else a 1-D
  // grid in chunks of `chunk` (batch, key/value head) pairs, the chunk's first key tiles (its longest CTAs) first.
  int chunk = 0;
};

// Adds a warp's 16 x D block of dQ (C fragments, rows g and g + 8) into the float32 accumulator with 16-byte
// atomics: neighbouring lanes (tig, tig ^ 1) trade halves so that each holds 4 consecutive columns of one row. No
// branches, only a predicated atomic: the wgmma backward runs this while its products are in flight, which a
// divergent branch would make the compiler wait for.
template <int kCols>
__device__ __forceinline__ void add_dq(const float (&dq)[kCols / 8][4], float* row_g, float* row_g8, int tig, bool ok_g,
                                       bool ok_g8) {
  const bool even = (tig & 1) == 0;
  const int col = 4 * (tig >> 1);
  float* row = even ? row_g : row_g8;  // even lanes keep row g and send row g + 8; odd lanes the other way round
  const bool ok = even ? ok_g : ok_g8;
#pragma unroll
  for (int n = 0; n < kCols / 8; ++n) {
    const float send0 = even ? dq[n][2] : dq[n][0], send1 = even ? dq[n][3] : dq[n][1];
    const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1), got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
    const float v0 = even ? dq[n][0] : got0, v1 = even ? dq[n][1] : got1;
    const float v2 = even ? got0 : dq[n][2], v3 = even ? got1 : dq[n][3];
    if (ok) atomicAdd(reinterpret_cast<float4*>(row + n * 8 + col), make_float4(v0, v1, v2, v3));
  }
}

// The same with 8-byte additions, each lane adding its own pairs (rows g and g + 8): no shuffles or selects, twice the
// additions, each a predicated reduction (ptx::red_add) off two base addresses.
template <int kCols>
__device__ __forceinline__ void add_dq_pairs(const float (&dq)[kCols / 8][4], float* row_g, float* row_g8, int tig,
                                             bool ok_g, bool ok_g8) {
  float* g = row_g + 2 * tig;
  float* g8 = row_g8 + 2 * tig;
#pragma unroll
  for (int n = 0; n < kCols / 8; ++n) {
    ptx::red_add(g + n * 8, dq[n][0], dq[n][1], ok_g);
    ptx::red_add(g8 + n * 8, dq[n][2], dq[n][3], ok_g8);
  }
}

// The C fragments of two adjacent 16x8 products (columns 16 kk .. 16 kk + 15 of a 16-row block) as the A fragment
// of the next product: the accumulator layout of m16n8 is the operand layout of m16k16, pair by pair.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// The backward's walk for a CTA holding the keys from k0 of key/value head kvh: step i takes query head
// kvh * group + i / per_head and its 64-row query tile first_q_tile + i % per_head, from the tile holding the first
// key's diagonal to the last (the tiles above the diagonal have P = 0); Position steps through the same tiles in
// BackwardArgs::walk's order.
struct BackwardWalk {
  int first_q_tile, per_head, steps, first_head, group, start_head;
  bool from_end;
  __device__ BackwardWalk(const BackwardArgs& a, int kvh, int k0, int q_rows, int k_tile = 0)
      : first_q_tile(k0 / q_rows),
        per_head((a.T + q_rows - 1) / q_rows - k0 / q_rows),
        steps(a.group * ((a.T + q_rows - 1) / q_rows - k0 / q_rows)),
        first_head(kvh * a.group),
        group(a.group),
        start_head(kvh * a.group + (a.walk == BackwardOrder::FromEnd ? k_tile % a.group : 0)),
        from_end(a.walk != BackwardOrder::FromDiagonal) {}
  __device__ int head(int i) const { return first_head + i / per_head; }
  __device__ int first_query(int i, int q_rows) const { return (first_q_tile + i % per_head) * q_rows; }
  // A step's head and query tile, moved along step by step without divisions.
  struct Position {
    int head, tile;  // tile: the query tile's index
  };
  __device__ Position start() const {
    return from_end ? Position{start_head, first_q_tile + per_head - 1} : Position{first_head, first_q_tile};
  }
  __device__ Position next(Position p) const {
    if (from_end) {
      if (++p.head == first_head + group) p.head = first_head;
      if (p.head == start_head) --p.tile;
      return p;
    }
    return ++p.tile == first_q_tile + per_head ? Position{p.head + 1, first_q_tile} : p;
  }
};

// The copies of a backward step (query head h, tile from row q0) into stage `stage` (cp.async, not committed): its
// kQueryRows rows of Q and dO through `load_rows(tile, src, stride, valid_rows)`, the kernel's own swizzled layout, and
// its rows of lse and Dvec. Rows past T load as zeros.
template <int D, int kQueryRows, class LoadRows>
__device__ __forceinline__ void load_backward_step(const BackwardArgs& a, int h, int q0, int b, int64_t row0, int stage,
                                                   bf16* sq, bf16* sdo, float* slse, float* sdvec, LoadRows load_rows) {
  load_rows(sq + stage * kQueryRows * D, a.q + (row0 + q0) * a.q_stride + h * D, a.q_stride, a.T - q0);
  load_rows(sdo + stage * kQueryRows * D, a.dout + (row0 + q0) * a.dout_stride + h * D, a.dout_stride, a.T - q0);
  const int64_t vec0 = (static_cast<int64_t>(b) * a.H + h) * a.T + q0;
  const int valid = a.T - q0;
  for (int r = threadIdx.x; r < kQueryRows; r += blockDim.x) {
    const bool ok = r < valid;
    ptx::cp_async4(ptx::smem_addr(slse + stage * kQueryRows + r), a.lse + vec0 + (ok ? r : 0), ok);
    ptx::cp_async4(ptx::smem_addr(sdvec + stage * kQueryRows + r), a.dvec + vec0 + (ok ? r : 0), ok);
  }
}

// Writes this thread's two key rows (t and t + 8) of dK (times the softmax scale) and dV, C fragments of D columns,
// in the gradients' dtype and row strides; rows past T are left out.
template <int D>
__device__ __forceinline__ void store_dk_dv(const BackwardArgs& a, const float (&dk)[D / 8][4],
                                            const float (&dv)[D / 8][4], int64_t row0, int t, int kvh, int tig) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (t + r * 8 >= a.T) continue;
    bf16* dk_dst = a.dk + (row0 + t + r * 8) * a.dk_stride + kvh * D + 2 * tig;
    bf16* dv_dst = a.dv + (row0 + t + r * 8) * a.dv_stride + kvh * D + 2 * tig;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk_dst + n * 8) = pack_bf16(dk[n][2 * r] * a.scale, dk[n][2 * r + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(dv_dst + n * 8) = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// How a backward kernel lays out its float32 dQ accumulator.
//   Rows: [B, T, H, D], the gradient's own order.
//   Fragments: [B, H, ceil(T / 64), 2, 64 x D / 2]: the 64-row query tile of one head, each half of its columns (one
//     warpgroup's share of a pipelined wgmma step) one contiguous region in the order the warpgroup's accumulator
//     registers hold it (warp, block of 8 columns, lane, 4 values: rows g and g + 8 at columns 2 t and 2 t + 1), so
//     that every thread adds 4 consecutive floats at a time, a warp's addition covers 512 contiguous bytes, and a
//     step's share can be added as one bulk reduction. It takes ceil(T / 64) * 64 rows; those past T are never read.
enum class DqLayout { Rows, Fragments };

// Offset of value e (0-3) of column block n at lane `lane` of warp w in a Fragments half of kHalf columns.
__host__ __device__ __forceinline__ int dq_fragment_offset(int w, int n, int lane, int e, int kHalf) {
  return ((w * (kHalf / 8) + n) * 32 + lane) * 4 + e;
}

// Where the accumulator's half `half` of query tile `tile` of head h of batch b starts (Fragments).
__host__ __device__ __forceinline__ int64_t dq_tile_offset(int b, int h, int tile, int half, int H, int T, int D) {
  const int64_t tiles = (T + 63) / 64;
  return (((static_cast<int64_t>(b) * H + h) * tiles + tile) * 2 + half) * 64 * (D / 2);
}

// The wgmma kernels (flash_attention_wgmma.cu) for head size D over B batches (and KV key/value heads), when this
// build and device have them (sm_90a code, a compute capability 9.0 GPU); false when they do not, and the caller
// runs its own. The backward is the main pass only: Dvec before it and dQ's scaling after it stay the caller's, and
// `layout` says how it laid out the dQ accumulator (a.dq holds B ceil(T / 64) 64 H D floats for every layout).
bool forward_wgmma(const ForwardArgs& a, int D, int B, cudaStream_t stream);
bool backward_wgmma(const BackwardArgs& a, int D, int B, int KV, cudaStream_t stream, DqLayout* layout);

}  // namespace retort::kernels::cuda::flash
