// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused causal attention's forward and backward on Hopper's warpgroup products (wgmma, sm_90a): the same results
// as the mma.sync kernels in flash_attention.cu, which stay for other GPUs.
//
// Forward: one CTA of two warpgroups takes 128 query rows of one head, 64 a warpgroup, and walks the key tiles (kKeys
// keys: 128, or 64 at head size 64, where two CTAs then share a multiprocessor) up to the diagonal with the online
// softmax. Per tile and warpgroup: S[64 x kKeys] = Q K^T as D / 16 products with both operands in shared memory; the
// running max and sum in registers; O[64 x D] += P V with P taken straight from S's registers as the A operand and V
// read MN-major from shared memory (the transpose bit), so P never touches shared memory. The products of P V trail by
// one tile: tile j issues S_j and then P_{j-1} V_{j-1}, and turns S_j into P_j while the tensor cores run the second;
// the two warpgroups take turns issuing a tile's products, so one's softmax runs under the other's. Q, K and V sit in
// shared memory as 128-byte-swizzled panels (wgmma.cuh), filled one tile ahead. Two schedules: the pipelined one keeps
// K and V in three stages whose loads arrive on a shared-memory barrier, each stage released on another once every
// thread has read it, so the warpgroups never meet at a CTA barrier; by default one thread loads each tile with the
// copy engine (TMA: a tensor map's 64-column boxes land in exactly that swizzled layout, and count their bytes on the
// barrier), else every thread issues cp.async copies. The lockstep one has two stages of K and three of V (V_{j-1} is
// read while V_{j+1} loads), cp.async, and a CTA barrier a tile.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/kernels/cuda/flash_attention_parts.cuh"
#include "core/kernels/cuda/ptx.cuh"
#include "core/kernels/cuda/wgmma.cuh"

namespace retort::kernels::cuda::flash {
namespace {
using namespace ptx;

constexpr int kRows = 128;  // query rows a CTA
constexpr int kThreads = 256;

// Rows [0, kTileRows) of a [.., stride] bf16 matrix starting at src into a swizzled tile of D columns; rows >= valid
// are zeros, by kThreadsT threads. A thread copies the same 16-byte chunk of every kThreadsT / (D / 8)-th row, a
// multiple of 8 rows apart, so its swizzled offset is one base plus whole rows: the address math is done once, not per
// copy.
// The first byte of dynamic shared memory at a multiple of 1024 bytes (the swizzled operands' alignment; the launch
// asks for the slack). Offsetting the shared array itself, rather than rounding an integer, keeps the pointer known
// to be shared, so the accesses through it compile to shared loads and stores, not generic ones.
__device__ __forceinline__ unsigned char* aligned_1024(unsigned char* smem) {
  return smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
}

template <int D, int kTileRows, int kThreadsT = kThreads>
__device__ __forceinline__ void load_swizzled(bf16* tile, const bf16* src, int64_t stride, int valid) {
  constexpr int kChunks = D / 8, kRowStep = kThreadsT / kChunks;
  static_assert(kRowStep % 8 == 0 && kTileRows % kRowStep == 0);
  const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  const uint32_t dst = smem_addr(tile + wgmma::swizzled_offset(kTileRows, r0, c * 8));
  const bf16* from = src + r0 * stride + c * 8;
#pragma unroll
  for (int k = 0; k < kTileRows / kRowStep; ++k) {
    const bool ok = r0 + k * kRowStep < valid;
    cp_async16(dst + k * kRowStep * 128, ok ? from + k * kRowStep * stride : src, ok);
  }
}

// A forward work item: query tile q_tile (of kRows rows) of head h of batch b.
struct ForwardItem {
  int q_tile, h, b, kvh;  // kvh: h's key/value head
};
__host__ __device__ __forceinline__ int forward_items(const ForwardArgs& a, int rows) {
  return (a.T + rows - 1) / rows * a.H * a.B;
}
// Item w of a launch. ForwardArgs::longest_first: chunks of ForwardArgs::pairs_per_chunk (batch, key/value head) pairs
// one after another; in a chunk the query tiles from the last (the chunk's longest rows first), and for each tile the
// chunk's query heads fastest, those of one key/value head side by side, then its batches. Else the query tiles
// fastest (from the last), then the heads, the batches.
__device__ __forceinline__ ForwardItem forward_item(const ForwardArgs& a, int w, int rows) {
  const int q_tiles = (a.T + rows - 1) / rows;
  if (a.longest_first) {
    const int KV = a.H / a.group, pairs = a.B * KV;
    const int per_chunk = a.pairs_per_chunk > 0 ? min(a.pairs_per_chunk, pairs) : pairs;
    const int chunk = w / (per_chunk * a.group * q_tiles), first = chunk * per_chunk;
    const int heads = min(per_chunk, pairs - first) * a.group;  // this chunk's (batch, query head) pairs
    const int r = w - chunk * per_chunk * a.group * q_tiles, i = r % heads;
    const int pair = first + i / a.group, kvh = pair % KV;
    return {q_tiles - 1 - r / heads, kvh * a.group + i % a.group, pair / KV, kvh};
  }
  const int h = w / q_tiles % a.H;
  return {q_tiles - 1 - w % q_tiles, h, w / (q_tiles * a.H), h / a.group};
}

// kBlocks CTAs a multiprocessor: 2 for the 64-key tiles at head size 64, whose accumulators fit in 128 registers.
// kPipelined: K and V in three stages whose copies each thread signals on a shared-memory barrier, and released on a
// second one once read, so the warpgroups never meet at a CTA barrier; else two stages of K, a CTA barrier a tile.
// kTma (pipelined only): thread 0 loads each tile of K and V with the copy engine from the tensor maps `maps`, which
// count their bytes on the stage's barrier, so no other thread issues a copy (Q's on the first tile's barrier, or on
// one of its own in the persistent kernel).
//
// A CTA takes the work items (query tile, head, batch; ForwardItem, longest first) in rounds of gridDim.x, its place in
// a round reversed every other round (blockIdx.x, then 2 gridDim.x - 1 - blockIdx.x, ...), so that the CTA that took
// a round's longest item takes the next round's shortest and the CTAs' sums of work stay level. kPersistent (the
// copy-engine kernel only): launched a CTA per slot of the GPU, its K and V tiles run as one stream through the three
// stages across items (the next item's first tile loads during this one's last), and the next item's Q loads once
// both warpgroups have read this one's for the last time, so a CTA's start (the first tiles' round trip) overlaps the
// item before; else a CTA an item.
template <int D, int kKeys, int kBlocks, bool kPipelined, bool kTma = false, bool kPersistent = false>
__global__ void __launch_bounds__(kThreads, kBlocks)
    wgmma_forward_kernel(const ForwardArgs a, const __grid_constant__ ForwardMaps maps) {
#if defined(RETORT_WGMMA_AVAILABLE)
  static_assert(kPipelined || !kTma);
  static_assert(kTma || !kPersistent);
  constexpr int kKStages = kPipelined ? 3 : 2;
  extern __shared__ unsigned char smem_raw[];
  // Swizzled operands start on 1024 bytes (the launch asks for the slack).
  bf16* sq = reinterpret_cast<bf16*>(aligned_1024(smem_raw));
  bf16* sk = sq + kRows * D;             // kKStages
  bf16* sv = sk + kKStages * kKeys * D;  // 3 stages: tile j - 1's is read while tile j + 1's loads
  // Pipelined: a stage's copies are in (every thread's arrival once its own land, or the copy engine's), a stage is
  // read (every thread's); persistent: Q's copy is in, Q is read for the last time in this item (every thread's).
  uint64_t* bars = reinterpret_cast<uint64_t*>(sv + 3 * kKeys * D);
  const uint32_t full = smem_addr(bars), empty = smem_addr(bars + 3), q_full = smem_addr(bars + 6),
                 q_empty = smem_addr(bars + 7);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int items = forward_items(a, kRows);

  if constexpr (kPipelined) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < 3; ++st) {
        mbarrier_init(full + 8 * st, kTma ? 1 : kThreads);
        mbarrier_init(empty + 8 * st, kThreads);
      }
      if constexpr (kTma) {
        mbarrier_init(q_full, 1);
        mbarrier_init(q_empty, kThreads);
      }
    }
    __syncthreads();  // the barriers are set up
  }
  // TMA: key tile j of `item` into stage st, panel by panel (64 columns each, the swizzled tile's panels), and the
  // bytes the stage's barrier then expects (with `extra` more). Q of `item` on barrier `bar`, its bytes expected
  // there by the caller: the persistent kernel's own barrier for Q, else the first tile's (one wait for both).
  const auto tma_tile = [&](const ForwardItem& item, int j, int st, uint32_t extra = 0) {
    const uint32_t bar = full + 8 * st;
    mbarrier_expect_tx(bar, 2 * kKeys * D * 2 + extra);
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      const int col = item.kvh * D + p * 64;
      tma_load_3d(smem_addr(sk + st * kKeys * D + p * kKeys * 64), &maps.k, col, j * kKeys, item.b, bar);
      tma_load_3d(smem_addr(sv + st * kKeys * D + p * kKeys * 64), &maps.v, col, j * kKeys, item.b, bar);
    }
  };
  const auto tma_q = [&](const ForwardItem& item, uint32_t bar) {
#pragma unroll
    for (int p = 0; p < D / 64; ++p)
      tma_load_3d(smem_addr(sq + p * kRows * 64), &maps.q, item.h * D + p * 64, item.q_tile * kRows, item.b, bar);
  };

  const auto item_index = [&](int n) {  // the CTA's n-th item
    const int round = static_cast<int>(gridDim.x), at = static_cast<int>(blockIdx.x);
    return n * round + ((n & 1) ? round - 1 - at : at);
  };
  int w = item_index(0);
  ForwardItem item = forward_item(a, w, kRows);
  if constexpr (kTma) {
    if (threadIdx.x == 0 && w < items) {
      if constexpr (kPersistent) {
        tma_tile(item, 0, 0);
        mbarrier_expect_tx(q_full, kRows * D * 2);
        tma_q(item, q_full);
      } else {
        tma_tile(item, 0, 0, kRows * D * 2);
        tma_q(item, full);
      }
    }
  }
  // base: the CTA's count of key tiles before this item's, so its tile j is the stream's tile base + j, in stage
  // (base + j) % 3; n: the CTA's count of items before this one (the parity of Q's barriers).
  for (int base = 0, n = 0; w < items; ++n) {
    const int next_w = item_index(n + 1);
    const bool has_next = kPersistent && next_w < items;
    const ForwardItem next = forward_item(a, has_next ? next_w : w, kRows);
    const int q_tile = item.q_tile, h = item.h, b = item.b, kvh = item.kvh;
    const int q0 = q_tile * kRows;
    const int wg_first = q0 + 64 * wg, wg_last = wg_first + 63;
    const int row = wg_first + 16 * (warp & 3) + g;  // this thread's rows: row and row + 8
    const int64_t row0 = static_cast<int64_t>(b) * a.T;
    const bf16* kbase = a.k + row0 * a.k_stride + kvh * D;
    const bf16* vbase = a.v + row0 * a.v_stride + kvh * D;
    if constexpr (!kTma) {
      load_swizzled<D, kRows>(sq, a.q + (row0 + q0) * a.q_stride + h * D, a.q_stride, a.T - q0);
      load_swizzled<D, kKeys>(sk, kbase, a.k_stride, a.T);
      load_swizzled<D, kKeys>(sv, vbase, a.v_stride, a.T);
      if constexpr (kPipelined) {
        cp_async_arrive(full);  // also covers Q
      } else {
        cp_async_commit();
      }
    }

    float o[D / 8][4];
#pragma unroll
    for (int c = 0; c < D / 8; ++c) o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this thread's part of the row sum
    const uint64_t q_desc = wgmma::descriptor(smem_addr(sq) + wg * 64 * 128);

    // Key tiles up to the last row's diagonal, none wholly past T; this warpgroup's stop before the first tile whose
    // keys all follow its rows.
    const int tiles = min((q0 + kRows - 1) / kKeys + 1, (a.T + kKeys - 1) / kKeys);
    const int my_tiles = min(tiles, wg_last / kKeys + 1);
    // Tile j's products: S_j = Q K_j^T, then O += P_{j-1} V_{j-1} behind it, so the tensor cores run the second
    // while this warpgroup turns S_j into P_j (the running max and sum). O is rescaled once P_{j-1} V_{j-1} is in.
    float s[kKeys / 8][4];
    uint32_t p[kKeys / 16][4];  // P_{j-1} as bf16 A fragments
    auto pv = [&](int j) {      // O += P_j V_j: 16 keys a step, V's rows 2048 bytes apart, its panels kKeys rows apart
      const uint64_t v_desc = wgmma::descriptor(smem_addr(sv + ((base + j) % 3) * kKeys * D), kKeys * 128);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk)
        wgmma::mma_rs<wgmma::Major::MN>(o, p[kk], wgmma::advance(v_desc, kk * 2048), 1);
    };
    // Waits for tile j's copies and starts the stream's next tile (this item's j + 1, or the next item's first).
    auto stage_in = [&](int j) {
      if constexpr (kTma) {
        // The stream's tile base + j + 1 goes where tile base + j - 2 was, once every thread has released it; thread
        // 0 issues it.
        const int t = base + j;
        if (threadIdx.x == 0 && (j + 1 < tiles || has_next)) {
          const int st = (t + 1) % 3;
          if (t >= 2) mbarrier_wait(empty + 8 * st, ((t - 2) / 3) & 1);
          if (j + 1 < tiles)
            tma_tile(item, j + 1, st);
          else
            tma_tile(next, 0, st);
        }
        mbarrier_wait(full + 8 * (t % 3), (t / 3) & 1);
      } else if constexpr (kPipelined) {
        // Tile j + 1 goes where tile j - 2 was, once every thread has released it (after its P V, in tile j - 1).
        if (j + 1 < tiles) {
          const int st = (j + 1) % 3, k1 = (j + 1) * kKeys;
          if (j >= 2) mbarrier_wait(empty + 8 * st, ((j - 2) / 3) & 1);
          load_swizzled<D, kKeys>(sk + st * kKeys * D, kbase + k1 * a.k_stride, a.k_stride, a.T - k1);
          load_swizzled<D, kKeys>(sv + st * kKeys * D, vbase + k1 * a.v_stride, a.v_stride, a.T - k1);
          cp_async_arrive(full + 8 * st);
        }
        mbarrier_wait(full + 8 * (j % 3), (j / 3) & 1);
        wgmma::fence_async_shared();  // the copies, written through the generic proxy, to the products
      } else {
        cp_async_wait<0>();
        wgmma::fence_async_shared();
        __syncthreads();  // tile j is in; every warpgroup is done with K_{j-1} and V_{j-2}
        if (j + 1 < tiles) {
          const int k1 = (j + 1) * kKeys;
          load_swizzled<D, kKeys>(sk + ((j + 1) & 1) * kKeys * D, kbase + k1 * a.k_stride, a.k_stride, a.T - k1);
          load_swizzled<D, kKeys>(sv + ((j + 1) % 3) * kKeys * D, vbase + k1 * a.v_stride, a.v_stride, a.T - k1);
          cp_async_commit();
        }
      }
    };
    // Once this thread's last scores of the item are in, Q is read: the next item's may load. The first thread of the
    // second warpgroup issues it (that warpgroup's products trail the first's, so it seldom waits).
    auto q_read = [&](int j) {
      if constexpr (kPersistent) {
        if (j != my_tiles - 1) return;
        mbarrier_arrive(q_empty);
        if (threadIdx.x == 128 && has_next) {
          mbarrier_wait(q_empty, n & 1);
          mbarrier_expect_tx(q_full, kRows * D * 2);
          tma_q(next, q_full);
        }
      }
    };
    // S = Q K_j^T: panel kk / 4 of each, 32 bytes a step of 16 within a panel.
    auto scores = [&](int j) {
      const uint64_t k_desc = wgmma::descriptor(smem_addr(sk + ((base + j) % kKStages) * kKeys * D));
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t step = (kk & 3) * 32;
        wgmma::mma_ss(s, wgmma::advance(q_desc, (kk >> 2) * kRows * 128 + step),
                      wgmma::advance(k_desc, (kk >> 2) * kKeys * 128 + step), kk > 0);
      }
      wgmma::commit();
    };
    // S_j into P_j in place (float32): the mask, the new running max, the sum; `correction` rescales the old O and l.
    auto softmax = [&](int j, float(&correction)[2]) {
      // Key > query masked where the tile reaches past the warpgroup's first row (keys past T are among them).
      const int k0 = j * kKeys;
      if (k0 + kKeys - 1 > wg_first) {
#pragma unroll
        for (int c = 0; c < kKeys / 8; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (k0 + c * 8 + 2 * tig + (e & 1) > row + (e >> 1) * 8) s[c][e] = -INFINITY;
      }
      // Base 2: m is the reference the weights are taken against, the running max of the scaled scores or up to
      // kSlack below it. It moves only when the max passes it by more than kSlack: until then the weights
      // exp2(s - m) stay below 2^kSlack, far inside float32 and bf16, and O and l share the stale reference, so
      // their ratio is the same; O's rescaling is skipped while no row of the warp moves (most tiles once the first
      // ones have set the scale). Every row sees a key <= it in each tile it visits (tiles and warpgroups are
      // aligned), so the max is finite.
      constexpr float kSlack = 8.f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < kKeys / 8; ++c) mx = fmaxf(mx, fmaxf(s[c][2 * r], s[c][2 * r + 1]));
        mx = quad_max(mx) * a.scale_log2;
        if (mx > m[r] + kSlack) {
          correction[r] = exp2_ftz(m[r] - mx);  // 0 on the first tile (m = -inf)
          m[r] = mx;
        } else {
          correction[r] = 1.f;
          mx = m[r];
        }
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < kKeys / 8; ++c) {
          s[c][2 * r] = exp2_ftz(fmaf(s[c][2 * r], a.scale_log2, -mx));
          s[c][2 * r + 1] = exp2_ftz(fmaf(s[c][2 * r + 1], a.scale_log2, -mx));
          sum += s[c][2 * r] + s[c][2 * r + 1];
        }
        l[r] = l[r] * correction[r] + sum;
      }
    };
    auto to_operand = [&] {
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) c_to_a(p[kk], s[2 * kk], s[2 * kk + 1]);
    };

    // Tile 0 (every warpgroup has it): O is still 0, nothing to rescale.
    float correction[2];
    // The warpgroups take turns issuing a tile's products, the first before the second (a named barrier: the first
    // arrives once it has issued, the second waits for that), so the first's scores are in while the second's still
    // run and its softmax overlaps them. Without a CTA barrier a tile (pipelined), the first can arrive for later
    // tiles before the second has waited for tile t, and two arrivals on one barrier would complete it without the
    // second; so tile j of an item takes named barrier 1 + j % 2: the first cannot arrive for j + 2 before the second
    // has waited for j (tile j + 2's copies wait for the second to release tile j, after its turn of it). Persistent,
    // the stream's tile t takes 1 + t % 3: the first can then also arrive for t + 2 (the next item's, while the second
    // stores this one's output) but not for t + 3 (its copies wait for the release of tile t). (Three barriers, and
    // Q on a barrier of its own, cost the kernel that is not persistent 3-11% on an H200: docs/benchmarks.md.)
    const auto turn_barrier = [&](int j) { return kPersistent ? 1 + (base + j) % 3 : 1 + (j & 1); };
    auto wait_turn = [&](int j) {
      if (wg == 1) asm volatile("bar.sync %0, 256;\n" ::"r"(turn_barrier(j)) : "memory");
    };
    auto pass_turn = [&](int j) {
      if (wg == 0) asm volatile("bar.arrive %0, 256;\n" ::"r"(turn_barrier(j)) : "memory");
    };
    stage_in(0);
    if constexpr (kPersistent) mbarrier_wait(q_full, n & 1);
    wait_turn(0);
    wgmma::fence();
    scores(0);
    pass_turn(0);
    wgmma::wait<0>();
    wgmma::keep(s);
    q_read(0);
    softmax(0, correction);
    to_operand();
    for (int j = 1; j < tiles; ++j) {
      stage_in(j);
      wait_turn(j);
      if (j >= my_tiles) {  // only the first warpgroup ends early
        pass_turn(j);
        continue;
      }
      wgmma::keep(o);
      wgmma::fence();
      scores(j);
      pv(j - 1);
      wgmma::commit();
      pass_turn(j);
      wgmma::wait<1>();
      wgmma::keep(s);
      q_read(j);  // here, while P_{j-1} V_{j-1} runs: placed after its wait, every tile took 8-10% longer
      softmax(j, correction);
      wgmma::wait<0>();  // P_{j-1} V_{j-1} is in O, and P_{j-1}'s registers are free
      wgmma::keep(o);
      if constexpr (kPipelined) mbarrier_arrive(empty + 8 * ((base + j - 1) % 3));  // K_{j-1}, V_{j-1} are read
      if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
          o[c][0] *= correction[0];
          o[c][1] *= correction[0];
          o[c][2] *= correction[1];
          o[c][3] *= correction[1];
        }
      }
      to_operand();
    }
    // The last tile's P V (V_{my_tiles - 1} is still in its stage: no copy was issued after it into that one).
    wgmma::keep(o);
    wgmma::fence();
    pv(my_tiles - 1);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(o);
    // The item's last tiles released for the stream's next ones (the first warpgroup never read those past its own).
    if constexpr (kPersistent)
      for (int j = my_tiles - 1; j < tiles; ++j) mbarrier_arrive(empty + 8 * ((base + j) % 3));

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[r]);
      const float inv = 1.f / sum;
      const int t = row + r * 8;
      if (t >= a.T) continue;
      bf16* dst = a.out + (row0 + t) * a.out_stride + h * D + 2 * tig;
#pragma unroll
      for (int c = 0; c < D / 8; ++c)
        *reinterpret_cast<uint32_t*>(dst + c * 8) = pack_bf16(o[c][2 * r] * inv, o[c][2 * r + 1] * inv);
      if (tig == 0) a.lse[(static_cast<int64_t>(b) * a.H + h) * a.T + t] = (m[r] + log2f(sum)) * kLn2;
    }
    if constexpr (!kPersistent) break;  // a CTA an item
    base += tiles;
    w = next_w;
    item = next;
  }
#endif  // RETORT_WGMMA_AVAILABLE
}

// Backward (the recomputation of FlashAttention-2, as the mma.sync kernel in flash_attention.cu) on warpgroup
// products. One CTA of kGroups warpgroups holds 64 kGroups keys of one key/value head, 64 a warpgroup (two; or one
// at head size 64, where three CTAs then share a multiprocessor and no barrier ties warpgroups together), and walks
// every 64-row query tile at or below the diagonal of every query head of its group. Per tile, each warpgroup for its
// 64 keys: S^T = K Q^T and dP^T = V dO^T (both operands in shared memory, K-major); P^T = exp2(S^T scale - lse)
// masked, dS^T = P^T (dP^T - Dvec) in registers; dV += P^T dO and dK += dS^T Q with P^T and dS^T as register A
// operands and dO, Q read MN-major, accumulating in registers over the whole walk. dS^T goes to shared memory
// ([key][query]) for dQ = dS K over the CTA's keys (dS read MN-major as A, K MN-major as B), each warpgroup taking
// D / kGroups of the columns, added into the float32 dQ buffer while the next step's first products run. The lockstep
// kernels add with atomics in the gradient's row order; the pipelined one in the order its registers hold the values
// (DqLayout::Fragments), 4 floats an atomic, or at head size 128 as one bulk reduction a warpgroup and step (DqAdd).
// Those additions cost the pipelined backward 11% of its time at 4 x 4096 x 32 x 8 x 128 on an H200, most of it
// the staging through shared memory (the writes and the proxy fence, not the warpgroup's meetings), which shares its
// bandwidth with the products' operands; 92-96% of the reductions hit the L2 (docs/benchmarks.md).
//
// Two schedules. The lockstep one (wgmma_backward_kernel): Q, dO, lse and Dvec double-buffered with cp.async, and two
// CTA barriers a step (the step's copies are in; dS^T is whole), so both warpgroups run their softmax at the same
// time while the tensor cores wait. The pipelined one (wgmma_backward_pipelined_kernel, two warpgroups): three stages
// whose arrival a shared-memory barrier tracks (loaded by the copy engine from tensor maps, one thread issuing them,
// where the operands allow the maps, else by every thread's cp.async), dQ's product for step i - 1 issued at the
// start of step i (so a warpgroup waits only for the other's half of dS^T from the step before, on a second pair of
// barriers), so one warpgroup's softmax can run under the other's products. (Making the warpgroups take turns
// issuing each batch of products, as the forward's do, was no faster: docs/benchmarks.md.)
constexpr int kQueryRows = 64;  // query rows a backward tile

// A backward CTA's key tile (of `keys` keys), key/value head and batch, from its place in the grid
// (BackwardArgs::chunk): in a chunk, every pair's first key tile, then every pair's second, and so on.
struct BackwardBlock {
  int k_tile, kvh, b;
};
__device__ __forceinline__ BackwardBlock backward_block(const BackwardArgs& a, int keys) {
  if (a.chunk == 0) return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  const int tiles = (a.T + keys - 1) / keys, kv = a.H / a.group, pairs = gridDim.x / tiles;
  const int first = static_cast<int>(blockIdx.x) / (a.chunk * tiles) * a.chunk;  // the chunk's first pair
  const int in_chunk = min(a.chunk, pairs - first), within = static_cast<int>(blockIdx.x) - first * tiles;
  const int pair = first + within % in_chunk;
  return {within / in_chunk, pair % kv, pair / kv};
}

#if defined(RETORT_WGMMA_AVAILABLE)
// The phases of one backward step for one warpgroup, shared by both schedules, and what both set up before the walk.
template <int D, int kKeyRows>
struct BackwardStep {
  static constexpr int kThreadsT = 2 * kKeyRows;   // a warpgroup a 64 keys
  static constexpr int kHalf = D * 64 / kKeyRows;  // dQ columns a warpgroup
  // The CTA's keys and values (k0 on, of key/value head kvh) into shared memory (cp.async, not committed).
  static __device__ __forceinline__ void load_keys(const BackwardArgs& a, bf16* sk, bf16* sv, int64_t row0, int k0,
                                                   int kvh) {
    load_swizzled<D, kKeyRows, kThreadsT>(sk, a.k + (row0 + k0) * a.k_stride + kvh * D, a.k_stride, a.T - k0);
    load_swizzled<D, kKeyRows, kThreadsT>(sv, a.v + (row0 + k0) * a.v_stride + kvh * D, a.v_stride, a.T - k0);
  }
  // Descriptors of warpgroup wg: its 64 rows of K and V (K-major A), K's columns of its dQ share (MN-major B, which
  // starts in K's panel wg kHalf / 64, (wg kHalf) % 64 columns in).
  struct KeyOperands {
    uint64_t k_rows, v_rows, k_cols;
  };
  static __device__ __forceinline__ KeyOperands key_operands(const bf16* sk, const bf16* sv, int wg) {
    const uint32_t k_addr = smem_addr(sk);
    return {wgmma::descriptor(k_addr + wg * 64 * 128), wgmma::descriptor(smem_addr(sv) + wg * 64 * 128),
            wgmma::descriptor(k_addr + (wg * kHalf / 64) * kKeyRows * 128 + (wg * kHalf % 64) * 2, kKeyRows * 128)};
  }
  static __device__ __forceinline__ void zero(float (&x)[D / 8][4]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[n][e] = 0.f;
  }
  // S^T = K Q^T and dP^T = V dO^T: panel kk / 4 of each operand, 32 bytes a step of 16 within a panel (not committed).
  static __device__ __forceinline__ void scores(float (&s)[8][4], float (&dp)[8][4], uint64_t k_rows, uint64_t v_rows,
                                                uint64_t q_k, uint64_t do_k) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;
      wgmma::mma_ss(s, wgmma::advance(k_rows, (kk >> 2) * kKeyRows * 128 + off),
                    wgmma::advance(q_k, (kk >> 2) * kQueryRows * 128 + off), kk > 0);
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk & 3) * 32;
      wgmma::mma_ss(dp, wgmma::advance(v_rows, (kk >> 2) * kKeyRows * 128 + off),
                    wgmma::advance(do_k, (kk >> 2) * kQueryRows * 128 + off), kk > 0);
    }
  }
  // P^T = exp2(S^T scale_log2 - lse log2 e), 0 where key > query (kMask: the tile reaches past the diagonal); dS^T =
  // P^T (dP^T - Dvec); both as A fragments.
  template <bool kMask>
  static __device__ __forceinline__ void gradients_of(float (&s)[8][4], float (&dp)[8][4], uint32_t (&pa)[4][4],
                                                      uint32_t (&dsa)[4][4], const float* slse_i, const float* sdvec_i,
                                                      float scale_log2, int key_row, int q0, int tig) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = n * 8 + 2 * tig + (e & 1);  // query column within the tile
        float p = exp2_ftz(fmaf(s[n][e], scale_log2, -slse_i[qc] * kLog2e));
        if (kMask && key_row + (e >> 1) * 8 > q0 + qc) p = 0.f;
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - sdvec_i[qc]);
      }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      c_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
      c_to_a(dsa[kk], dp[2 * kk], dp[2 * kk + 1]);
    }
  }
  // The same, the mask's comparisons only on the tiles that need them (a warp-uniform branch with no products inside).
  static __device__ __forceinline__ void gradients(float (&s)[8][4], float (&dp)[8][4], uint32_t (&pa)[4][4],
                                                   uint32_t (&dsa)[4][4], const float* slse_i, const float* sdvec_i,
                                                   float scale_log2, bool masking, int key_row, int q0, int tig) {
    if (masking) {
      gradients_of<true>(s, dp, pa, dsa, slse_i, sdvec_i, scale_log2, key_row, q0, tig);
    } else {
      gradients_of<false>(s, dp, pa, dsa, slse_i, sdvec_i, scale_log2, key_row, q0, tig);
    }
  }
  // dV += P^T dO and dK += dS^T Q over the tile's 64 queries (16 a step, rows 2048 bytes apart; not committed).
  static __device__ __forceinline__ void key_gradients(float (&dv)[D / 8][4], float (&dk)[D / 8][4],
                                                       const uint32_t (&pa)[4][4], const uint32_t (&dsa)[4][4],
                                                       uint64_t do_mn, uint64_t q_mn) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_rs<wgmma::Major::MN>(dv, pa[kk], wgmma::advance(do_mn, kk * 2048), 1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_rs<wgmma::Major::MN>(dk, dsa[kk], wgmma::advance(q_mn, kk * 2048), 1);
  }
  // dS^T rows kr (+ 8) of this warpgroup's block `rows`, query columns 16 kk + 2 tig (+ 8): the A fragment's layout.
  static __device__ __forceinline__ void store_ds(bf16* rows, const uint32_t (&dsa)[4][4], int kr, int tig) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr, 16 * kk + 2 * tig)) = dsa[kk][0];
      *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr + 8, 16 * kk + 2 * tig)) = dsa[kk][1];
      *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr, 16 * kk + 8 + 2 * tig)) = dsa[kk][2];
      *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr + 8, 16 * kk + 8 + 2 * tig)) = dsa[kk][3];
    }
  }
  // dQ[64 x kHalf] = dS K over the CTA's keys: this warpgroup's share of the columns (not committed).
  template <int kHalf>
  static __device__ __forceinline__ void query_gradient(float (&dq)[kHalf / 8][4], uint64_t ds_desc, uint64_t k_cols) {
#pragma unroll
    for (int kk = 0; kk < kKeyRows / 16; ++kk)
      wgmma::mma_ss<wgmma::Major::MN, wgmma::Major::MN>(dq, wgmma::advance(ds_desc, kk * 2048),
                                                        wgmma::advance(k_cols, kk * 2048), kk > 0);
  }
};
#endif  // RETORT_WGMMA_AVAILABLE

// Rows g and g + 8 of a warp's dQ block into the float32 buffer: 8-byte atomics of each lane's own pairs at head size
// 128, 16-byte ones after a shuffle at 64 (each 2-3% ahead of the other there on an H200; docs/benchmarks.md).
template <int D, int kHalf>
__device__ __forceinline__ void add_dq_rows(const float (&rows)[kHalf / 8][4], float* row_g, int64_t row_stride,
                                            int tig, bool ok_g, bool ok_g8) {
  if constexpr (D == 128) {
    add_dq_pairs<kHalf>(rows, row_g, row_g + 8 * row_stride, tig, ok_g, ok_g8);
  } else {
    add_dq<kHalf>(rows, row_g, row_g + 8 * row_stride, tig, ok_g, ok_g8);
  }
}

template <int D, int kGroups>
__global__ void __launch_bounds__(128 * kGroups, kGroups == 1 ? 3 : 1) wgmma_backward_kernel(const BackwardArgs a) {
#if defined(RETORT_WGMMA_AVAILABLE)
  constexpr int kKeyRows = 64 * kGroups;  // keys a CTA
  constexpr int kThreadsT = 128 * kGroups;
  constexpr int kHalf = D / kGroups;  // dQ columns a warpgroup
  using Step = BackwardStep<D, kKeyRows>;
  extern __shared__ unsigned char smem_raw[];
  bf16* sk = reinterpret_cast<bf16*>(aligned_1024(smem_raw));
  bf16* sv = sk + kKeyRows * D;
  bf16* sq = sv + kKeyRows * D;                                         // 2 stages
  bf16* sdo = sq + 2 * kQueryRows * D;                                  // 2 stages
  bf16* sds = sdo + 2 * kQueryRows * D;                                 // dS^T [key][query], kKeyRows x kQueryRows
  float* slse = reinterpret_cast<float*>(sds + kKeyRows * kQueryRows);  // 2 stages
  float* sdvec = slse + 2 * kQueryRows;                                 // 2 stages

  const auto [k_tile, kvh, b] = backward_block(a, 64 * kGroups);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = k_tile * kKeyRows;
  const int key_first = k0 + 64 * wg;  // this warpgroup's keys
  const int kr = 16 * (warp & 3) + g;  // this thread's key rows kr, kr + 8 within them (and query rows of dQ)
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const BackwardWalk walk(a, kvh, k0, kQueryRows);
  const int steps = walk.steps;

  auto load_step = [&](int i) {
    load_backward_step<D, kQueryRows>(a, walk.head(i), walk.first_query(i, kQueryRows), b, row0, i & 1, sq, sdo, slse,
                                      sdvec, [](bf16* tile, const bf16* src, int64_t stride, int valid) {
                                        load_swizzled<D, kQueryRows, kThreadsT>(tile, src, stride, valid);
                                      });
  };

  Step::load_keys(a, sk, sv, row0, k0, kvh);
  load_step(0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  Step::zero(dk);
  Step::zero(dv);
  const auto [k_rows, v_rows, k_cols] = Step::key_operands(sk, sv, wg);
  const uint64_t ds_desc = wgmma::descriptor(smem_addr(sds), kKeyRows * kQueryRows * 2);
  // dQ[64 x kHalf] of the last step, and where it goes: it is added during the next step's first products.
  float dq[kHalf / 8][4], dq_out[kHalf / 8][4];
  float* dq_row = a.dq;
  bool dq_ok_g = false, dq_ok_g8 = false;
  const int64_t dq_stride = static_cast<int64_t>(a.H) * D;

  for (int i = 0; i < steps; ++i) {
    cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();  // step i is in; step i - 1's stage and dS^T are no longer read
    if (i + 1 < steps) {
      load_step(i + 1);
      cp_async_commit();
    }
    const int stage = i & 1;
    const uint32_t q_addr = smem_addr(sq + stage * kQueryRows * D), do_addr = smem_addr(sdo + stage * kQueryRows * D);
    const int h = walk.head(i);
    const int q0 = walk.first_query(i, kQueryRows);

    // Every warpgroup runs every step, also one whose keys all follow the tile's queries (the first step of a head
    // for the second warpgroup): its P^T is masked to 0 and so are its dS^T rows. Skipping it would put the
    // products on a divergent path, where the compiler serialises them.
    float s[8][4], dp[8][4];
    wgmma::fence();
    Step::scores(s, dp, k_rows, v_rows, wgmma::descriptor(q_addr), wgmma::descriptor(do_addr));
    wgmma::commit();
    // The previous step's dQ goes out while these products run.
    add_dq_rows<D, kHalf>(dq_out, dq_row, dq_stride, tig, i > 0 && dq_ok_g, i > 0 && dq_ok_g8);
    wgmma::wait<0>();
    wgmma::keep(s);
    wgmma::keep(dp);

    uint32_t pa[4][4], dsa[4][4];
    // A warp-uniform branch with no products inside.
    Step::gradients(s, dp, pa, dsa, slse + stage * kQueryRows, sdvec + stage * kQueryRows, a.scale_log2,
                    key_first + 63 > q0, key_first + kr, q0, tig);
    wgmma::keep(dv);
    wgmma::keep(dk);
    wgmma::fence();
    Step::key_gradients(dv, dk, pa, dsa, wgmma::descriptor(do_addr, kQueryRows * 128),
                        wgmma::descriptor(q_addr, kQueryRows * 128));
    wgmma::commit();
    Step::store_ds(sds + 64 * wg * kQueryRows, dsa, kr, tig);
    wgmma::wait<0>();
    wgmma::keep(dv);
    wgmma::keep(dk);
    wgmma::fence_async_shared();
    __syncthreads();  // dS^T is whole

    wgmma::fence();
    Step::template query_gradient<kHalf>(dq, ds_desc, k_cols);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(dq);
    // Copied out of the product's registers (an add of +0, which ptxas keeps where it drops a plain move): read
    // across the loop's back edge, those would make the compiler wait for every product in flight before the next
    // step's atomics, the very products they are meant to run beside.
#pragma unroll
    for (int n = 0; n < kHalf / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("add.f32 %0, %1, 0f00000000;\n" : "=f"(dq_out[n][e]) : "f"(dq[n][e]));
    const int t = q0 + kr;
    dq_row = a.dq + ((row0 + t) * a.H + h) * D + wg * kHalf;
    dq_ok_g = t < a.T;
    dq_ok_g8 = t + 8 < a.T;
  }
  add_dq_rows<D, kHalf>(dq_out, dq_row, dq_stride, tig, steps > 0 && dq_ok_g, steps > 0 && dq_ok_g8);

  store_dk_dv<D>(a, dk, dv, row0, key_first + kr, kvh, tig);
#endif  // RETORT_WGMMA_AVAILABLE
}

// How the pipelined backward adds a step's dQ into the accumulator: every thread its own pairs with atomics in Rows
// (DqLayout); every thread its registers 4 at a time in Fragments; or the warpgroup's share, written into shared memory
// in the Fragments order, as one bulk reduction of the copy engine.
enum class DqAdd { RowAtomics, FragmentAtomics, FragmentBulk };

// kTma: thread 0 loads K and V and each step's Q, dO, lse and Dvec with the copy engine from the tensor maps `maps`,
// which count their bytes on the stage's barrier; else every thread issues cp.async copies.
template <int D, DqAdd kDq, bool kTma = false>
__global__ void __launch_bounds__(256, 1)
    wgmma_backward_pipelined_kernel(const BackwardArgs a, const __grid_constant__ BackwardMaps maps) {
#if defined(RETORT_WGMMA_AVAILABLE)
  constexpr int kKeyRows = 128, kThreadsT = 256, kHalf = D / 2, kStages = 3;
  using Step = BackwardStep<D, kKeyRows>;
  extern __shared__ unsigned char smem_raw[];
  bf16* sk = reinterpret_cast<bf16*>(aligned_1024(smem_raw));
  bf16* sv = sk + kKeyRows * D;
  bf16* sq = sv + kKeyRows * D;                                            // kStages
  bf16* sdo = sq + kStages * kQueryRows * D;                               // kStages
  bf16* sds = sdo + kStages * kQueryRows * D;                              // 2 buffers of dS^T [key][query]
  float* sdq = reinterpret_cast<float*>(sds + 2 * kKeyRows * kQueryRows);  // dQ, 64 x kHalf a warpgroup (bulk)
  float* slse = sdq + (kDq == DqAdd::FragmentBulk ? kQueryRows * D : 0);   // kStages
  float* sdvec = slse + kStages * kQueryRows;                              // kStages
  // Barriers: a stage's copies are in (every thread's arrive once its own copies land), a buffer of dS^T is whole
  // (every thread's arrive once its part is stored).
  uint64_t* bars = reinterpret_cast<uint64_t*>(sdvec + kStages * kQueryRows);
  const uint32_t full = smem_addr(bars), ds_whole = smem_addr(bars + kStages);

  const auto [k_tile, kvh, b] = backward_block(a, kKeyRows);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = k_tile * kKeyRows;
  const int key_first = k0 + 64 * wg;
  const int kr = 16 * (warp & 3) + g;
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const BackwardWalk walk(a, kvh, k0, kQueryRows, k_tile);
  const int steps = walk.steps;

  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) mbarrier_init(full + 8 * st, kTma ? 1 : kThreadsT);
    for (int buf = 0; buf < 2; ++buf) mbarrier_init(ds_whole + 8 * buf, kThreadsT);
  }
  __syncthreads();  // the barriers are set up

  // The copies of a step at `at` into `stage`: TMA from thread 0 (the caller's), `extra` more bytes expected on the
  // barrier; else every thread's cp.async and its arrival on the stage's barrier once they land.
  constexpr uint32_t kStepBytes = 2 * kQueryRows * D * 2 + 2 * kQueryRows * 4;
  const auto load_step = [&](BackwardWalk::Position at, int stage, uint32_t extra = 0) {
    const int q0 = at.tile * kQueryRows;
    if constexpr (kTma) {
      const uint32_t bar = full + 8 * stage;
      mbarrier_expect_tx(bar, kStepBytes + extra);
#pragma unroll
      for (int p = 0; p < D / 64; ++p) {
        const int col = at.head * D + p * 64, off = stage * kQueryRows * D + p * kQueryRows * 64;
        tma_load_3d(smem_addr(sq + off), &maps.q, col, q0, b, bar);
        tma_load_3d(smem_addr(sdo + off), &maps.dout, col, q0, b, bar);
      }
      tma_load_2d(smem_addr(slse + stage * kQueryRows), &maps.lse, q0, b * a.H + at.head, bar);
      tma_load_2d(smem_addr(sdvec + stage * kQueryRows), &maps.dvec, q0, b * a.H + at.head, bar);
    } else {
      load_backward_step<D, kQueryRows>(a, at.head, q0, b, row0, stage, sq, sdo, slse, sdvec,
                                        [](bf16* tile, const bf16* src, int64_t stride, int valid) {
                                          load_swizzled<D, kQueryRows, kThreadsT>(tile, src, stride, valid);
                                        });
      cp_async_arrive(full + 8 * stage);
    }
  };
  // Steps i - 1, i and i + 1 of the walk, moved along once a step (the divisions of BackwardWalk::head cost more than
  // the step's address math).
  BackwardWalk::Position before = walk.start(), now = walk.start(), after = walk.next(walk.start());
  if constexpr (kTma) {
    if (threadIdx.x == 0 && steps > 0) {  // K and V count on the first stage's barrier
#pragma unroll
      for (int p = 0; p < D / 64; ++p) {
        const int col = kvh * D + p * 64, off = p * kKeyRows * 64;
        tma_load_3d(smem_addr(sk + off), &maps.k, col, k0, b, full);
        tma_load_3d(smem_addr(sv + off), &maps.v, col, k0, b, full);
      }
      load_step(now, 0, 2 * kKeyRows * D * 2);
    }
  } else {
    Step::load_keys(a, sk, sv, row0, k0, kvh);
    if (steps > 0) load_step(now, 0);  // its arrival also covers K and V
  }

  float dk[D / 8][4], dv[D / 8][4];
  Step::zero(dk);
  Step::zero(dv);
  const auto [k_rows, v_rows, k_cols] = Step::key_operands(sk, sv, wg);
  const auto ds_desc = [&](int buf) {
    return wgmma::descriptor(smem_addr(sds + buf * kKeyRows * kQueryRows), kKeyRows * kQueryRows * 2);
  };
  const int64_t dq_stride = static_cast<int64_t>(a.H) * D;
  // Adds a step's dQ at `at` (this thread's rows kr and kr + 8 of the tile, this warpgroup's columns). Bulk: the
  // warpgroup's registers into its shared buffer once the last step's reduction has read it (its first thread waits
  // for that, then the warpgroup meets), then, once all are written (the warpgroup meets again), one reduction of the
  // whole share from that thread, which runs beside the next products.
  float* my_sdq = sdq + wg * kQueryRows * kHalf;
  const bool dq_issuer = (warp & 3) == 0 && lane == 0;
  const int fragment = dq_fragment_offset(warp & 3, 0, lane, 0, kHalf);  // this thread's first value in a half
  const auto add_dq_of = [&](const float(&rows)[kHalf / 8][4], BackwardWalk::Position at, bool live) {
    if constexpr (kDq == DqAdd::RowAtomics) {
      const int t = at.tile * kQueryRows + kr;
      float* row = a.dq + ((row0 + t) * a.H + at.head) * D + wg * kHalf;
      add_dq_rows<D, kHalf>(rows, row, dq_stride, tig, live && t < a.T, live && t + 8 < a.T);
    } else if constexpr (kDq == DqAdd::FragmentAtomics) {
      float* half = a.dq + dq_tile_offset(b, at.head, at.tile, wg, a.H, a.T, D) + fragment;
      if (live) {
#pragma unroll
        for (int n = 0; n < kHalf / 8; ++n) red_add4(half + n * 128, rows[n][0], rows[n][1], rows[n][2], rows[n][3]);
      }
    } else {
      if (!live) return;  // uniform over the CTA
      if (dq_issuer) bulk_wait_read<0>();
      named_barrier_sync(1 + wg, 128);
#pragma unroll
      for (int n = 0; n < kHalf / 8; ++n)
        *reinterpret_cast<float4*>(my_sdq + fragment + n * 128) =
            make_float4(rows[n][0], rows[n][1], rows[n][2], rows[n][3]);
      wgmma::fence_async_shared();  // the values, written through the generic proxy, to the copy engine
      named_barrier_sync(1 + wg, 128);
      if (dq_issuer) {
        bulk_add_f32(a.dq + dq_tile_offset(b, at.head, at.tile, wg, a.H, a.T, D), smem_addr(my_sdq),
                     kQueryRows * kHalf * 4);
        bulk_commit();
      }
    }
  };
  float dq[kHalf / 8][4];

  int stage = 0, phase = 0;  // step i's stage (i % kStages) and the parity of its barrier's phase (i / kStages)
  for (int i = 0; i < steps; ++i) {
    mbarrier_wait(full + 8 * stage, phase);
    if (i > 0) mbarrier_wait(ds_whole + 8 * ((i - 1) & 1), ((i - 1) >> 1) & 1);
    wgmma::fence_async_shared();  // the copies and dS^T, written through the generic proxy, to the products
    const uint32_t q_addr = smem_addr(sq + stage * kQueryRows * D), do_addr = smem_addr(sdo + stage * kQueryRows * D);
    const int q0 = now.tile * kQueryRows;

    // dQ of step i - 1 (its dS^T is whole), then S^T and dP^T of step i. Step 0 multiplies the unwritten second
    // buffer too and adds nothing: every step then commits the same groups, which ptxas needs to keep the products
    // in flight across the loop (with a group only from step 1 on, it serialises them at head size 64).
    float s[8][4], dp[8][4];
    wgmma::fence();
    Step::template query_gradient<kHalf>(dq, ds_desc((i - 1) & 1), k_cols);
    wgmma::commit();
    Step::scores(s, dp, k_rows, v_rows, wgmma::descriptor(q_addr), wgmma::descriptor(do_addr));
    wgmma::commit();
    // Step i + 1's copies into the stage step i - 2 used: every thread of both warpgroups is past it (this one
    // waited for the other's dS^T of step i - 1, stored after its step i - 2 products were done).
    const int next_stage = stage == kStages - 1 ? 0 : stage + 1;
    if (i + 1 < steps && (!kTma || threadIdx.x == 0)) load_step(after, next_stage);
    wgmma::wait<1>();  // dQ of step i - 1 (and dV, dK of step i - 1) are in; S^T and dP^T may still run
    wgmma::keep(dq);
    add_dq_of(dq, before, i > 0);
    wgmma::wait<0>();
    wgmma::keep(s);
    wgmma::keep(dp);
    wgmma::keep(dv);
    wgmma::keep(dk);

    uint32_t pa[4][4], dsa[4][4];
    Step::gradients(s, dp, pa, dsa, slse + stage * kQueryRows, sdvec + stage * kQueryRows, a.scale_log2,
                    key_first + 63 > q0, key_first + kr, q0, tig);
    wgmma::fence();
    Step::key_gradients(dv, dk, pa, dsa, wgmma::descriptor(do_addr, kQueryRows * 128),
                        wgmma::descriptor(q_addr, kQueryRows * 128));
    wgmma::commit();
    Step::store_ds(sds + (i & 1) * kKeyRows * kQueryRows + 64 * wg * kQueryRows, dsa, kr, tig);
    wgmma::fence_async_shared();
    mbarrier_arrive(ds_whole + 8 * (i & 1));
    // At head size 128 dV and dK (128 registers) are done before the next step's products: in flight beside them
    // they leave ptxas too few registers, and it serialises every product.
    if constexpr (D == 128) {
      wgmma::wait<0>();
      wgmma::keep(dv);
      wgmma::keep(dk);
    }
    phase ^= next_stage == 0 ? 1 : 0;
    stage = next_stage;
    before = now;
    now = after;
    after = walk.next(after);
  }
  if (steps > 0) {
    const int last = steps - 1;
    mbarrier_wait(ds_whole + 8 * (last & 1), (last >> 1) & 1);
    wgmma::fence_async_shared();
    wgmma::fence();
    Step::template query_gradient<kHalf>(dq, ds_desc(last & 1), k_cols);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(dq);
    wgmma::keep(dv);
    wgmma::keep(dk);
    add_dq_of(dq, before, true);
  }
  if constexpr (kDq == DqAdd::FragmentBulk) {
    if (dq_issuer) bulk_wait<0>();  // the reductions have read the buffer before the CTA's shared memory goes
  }
  store_dk_dv<D>(a, dk, dv, row0, key_first + kr, kvh, tig);
#endif  // RETORT_WGMMA_AVAILABLE
}

}  // namespace

#if defined(RETORT_CUDA_SM90A)
namespace {
// The current device runs sm_90a code: compute capability 9.0.
bool hopper() {
  int device = 0, major = 0, minor = 0;
  RETORT_CUDA_CHECK(cudaGetDevice(&device));
  RETORT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  RETORT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

// The environment variable `name` is set to `value`. The kernels' switches are read a call, so that a benchmark can
// measure the kernels against each other in one process (docs/benchmarks.md).
bool env_is(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::string_view(set) == value;
}

// The longest CTAs first (ForwardArgs::longest_first), unless RETORT_FLASH_GRID=tile-fastest asks for the grid with
// the tile fastest.
bool longest_first_grid() {
  return !env_is("RETORT_FLASH_GRID", "tile-fastest");
}

// The current device's multiprocessors.
int multiprocessors() {
  int device = 0, sms = 0;
  RETORT_CUDA_CHECK(cudaGetDevice(&device));
  RETORT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// The backward's chunk (BackwardArgs::chunk) for `tiles` key tiles of `pairs` (batch, key/value head) pairs: about a
// wave of CTAs, one a multiprocessor; RETORT_FLASH_GRID=tile-fastest gives 0 (the key tile fastest) and
// RETORT_FLASH_GRID=longest-first one chunk of every pair.
int backward_chunk(int tiles, int pairs) {
  if (env_is("RETORT_FLASH_GRID", "tile-fastest")) return 0;
  if (env_is("RETORT_FLASH_GRID", "longest-first")) return pairs;
  return std::clamp(multiprocessors() / tiles, 1, pairs);
}
}  // namespace
#endif

#if defined(RETORT_CUDA_SM90A)
namespace {
// The driver's cuTensorMapEncodeTiled (through the runtime, so nothing links the driver library), once a process.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    RETORT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f) : nullptr;
  }();
  return fn;
}

// A map of the bf16 tensor [B, T, cols] at `base` (rows `stride` elements apart) in boxes of 64 columns by `rows`
// rows with the 128-byte swizzle; false where the driver or the operand's alignment does not allow one.
bool tensor_map(CUtensorMap* map, const bf16* base, int64_t stride, int64_t cols, int T, int B, int rows) {
  const auto encode = encode_tiled();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || stride % 8 != 0) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(B)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(stride) * 2, static_cast<cuuint64_t>(stride) * 2 * T};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(rows), 1}, steps[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16*>(base), dims, strides, box, steps,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A map of the float32 rows [heads, T] at `base` in boxes of `rows` values of one row; false where the driver or the
// alignment (T a multiple of 4) does not allow one.
bool row_map(CUtensorMap* map, const float* base, int T, int heads, int rows) {
  const auto encode = encode_tiled();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || T % 4 != 0) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(heads)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(T) * 4};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(rows), 1}, steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box, steps,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
}  // namespace
#endif

bool forward_wgmma(const ForwardArgs& args, int D, int B, cudaStream_t stream) {
#if defined(RETORT_CUDA_SM90A)
  if (!hopper()) return false;
  ForwardArgs a = args;
  a.longest_first = longest_first_grid();
  a.B = B;
  // At head size 128, chunks of about a wave of CTAs (one a multiprocessor): 1-2% faster than one chunk of every pair
  // at the Llama-like shapes, with a fifth of the DRAM reads at 4 x 4096 (an H200). At 64 (two CTAs a multiprocessor)
  // the chunks were 2-7% slower, so one chunk there. RETORT_FLASH_GRID=longest-first or chunks picks one.
  const bool chunks =
      env_is("RETORT_FLASH_GRID", "chunks") || (D == 128 && !env_is("RETORT_FLASH_GRID", "longest-first"));
  if (chunks) {
    const int q_tiles = (a.T + kRows - 1) / kRows, wave = multiprocessors() * (D == 128 ? 1 : 2);
    a.pairs_per_chunk = std::max(1, (wave + a.group * q_tiles / 2) / (a.group * q_tiles));
  }
  const int items = forward_items(a, kRows);
  ForwardMaps maps{};
  // persistent (a kPersistent kernel): as many CTAs as fit on the GPU at once, each taking items in rounds; else a CTA
  // an item.
  auto launch = [&](auto kernel, int keys, bool pipelined, bool persistent = false) {
    // Q, 2 or 3 stages of K, 3 of V, eight barriers, the slack to align.
    const int smem_bytes = (kRows + (pipelined ? 6 : 5) * keys) * D * 2 + (pipelined ? 64 : 0) + 1024;
    RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    int ctas = items;
    if (persistent) {
      int per_sm = 0;
      RETORT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes));
      ctas = std::min(items, std::max(per_sm, 1) * multiprocessors());
    }
    kernel<<<static_cast<unsigned>(ctas), kThreads, smem_bytes, stream>>>(a, maps);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  // The pipelined schedule with the copy engine's loads (TMA), 128-key tiles at head size 128 and 64-key tiles with
  // two CTAs a multiprocessor at 64, where the operands allow the tensor maps: 5-7% faster than every thread's
  // cp.async at 128 and 5-8% than the lockstep schedule at 64 on an H200 (docs/benchmarks.md). To measure the kernels
  // against each other, RETORT_FLASH_FORWARD_SCHEDULE=pipelined (cp.async from every thread) or lockstep picks another
  // schedule, and RETORT_FLASH_FORWARD_KEYS=128 the lockstep kernel's 128-key tiles at head size 64.
  const bool pipelined = env_is("RETORT_FLASH_FORWARD_SCHEDULE", "pipelined");
  const bool lockstep = env_is("RETORT_FLASH_FORWARD_SCHEDULE", "lockstep");
  const bool keys_128 = D == 64 && env_is("RETORT_FLASH_FORWARD_KEYS", "128");
  if (!pipelined && !lockstep && !keys_128) {
    const int KVD = a.H / a.group * D, keys = D == 128 ? 128 : 64;
    if (tensor_map(&maps.q, a.q, a.q_stride, a.H * D, a.T, B, kRows) &&
        tensor_map(&maps.k, a.k, a.k_stride, KVD, a.T, B, keys) &&
        tensor_map(&maps.v, a.v, a.v_stride, KVD, a.T, B, keys)) {
      // Persistent at head size 128 up to 8 query tiles a head (T <= 1024: items of 1 to 8 key tiles, whose start
      // it overlaps), 3-6% faster there and 1-3% slower at T = 2048 and 4096; a CTA an item at head size 64, where
      // persistent was 3-16% slower (an H200, docs/benchmarks.md). RETORT_FLASH_FORWARD_PERSISTENT=0 or 1 picks one,
      // to measure them against each other.
      const bool persistent = env_is("RETORT_FLASH_FORWARD_PERSISTENT", "1") ||
                              (D == 128 && a.T <= 8 * kRows && !env_is("RETORT_FLASH_FORWARD_PERSISTENT", "0"));
      if (D == 128 && persistent)
        launch(wgmma_forward_kernel<128, 128, 1, true, true, true>, 128, true, true);
      else if (D == 128)
        launch(wgmma_forward_kernel<128, 128, 1, true, true>, 128, true);
      else if (persistent)
        launch(wgmma_forward_kernel<64, 64, 2, true, true, true>, 64, true, true);
      else
        launch(wgmma_forward_kernel<64, 64, 2, true, true>, 64, true);
      return true;
    }
  }
  // Without the maps: the cp.async schedules, pipelined at head size 128 (12-15% faster than lockstep at T = 2048 and
  // 4096) and lockstep at 64 (pipelined was 0-4% slower there).
  if (D == 128) {
    if (lockstep)
      launch(wgmma_forward_kernel<128, 128, 1, false>, 128, false);
    else
      launch(wgmma_forward_kernel<128, 128, 1, true>, 128, true);
  } else if (keys_128) {
    launch(wgmma_forward_kernel<64, 128, 1, false>, 128, false);
  } else if (pipelined) {
    launch(wgmma_forward_kernel<64, 64, 2, true>, 64, true);
  } else {
    launch(wgmma_forward_kernel<64, 64, 2, false>, 64, false);
  }
  return true;
#else
  (void)args, (void)D, (void)B, (void)stream;
  return false;
#endif
}

bool backward_wgmma(const BackwardArgs& args, int D, int B, int KV, cudaStream_t stream, DqLayout* layout) {
#if defined(RETORT_CUDA_SM90A)
  if (!hopper()) return false;
  // The pipelined kernels walk the query tiles from the end (BackwardOrder) unless RETORT_FLASH_BACKWARD_WALK=diagonal
  // (or =aligned: from the end, every CTA starting on the group's first head) asks for another order, to measure them
  // against each other (docs/benchmarks.md).
  BackwardArgs a = args;
  a.walk = env_is("RETORT_FLASH_BACKWARD_WALK", "diagonal")  ? BackwardOrder::FromDiagonal
           : env_is("RETORT_FLASH_BACKWARD_WALK", "aligned") ? BackwardOrder::FromEndAligned
                                                             : BackwardOrder::FromEnd;
  *layout = DqLayout::Rows;  // the lockstep kernels'
  const auto launch = [&](auto kernel, int groups, int smem_bytes, auto... extra) {
    const int keys = 64 * groups;
    const int tiles = (a.T + keys - 1) / keys;
    BackwardArgs args_of_grid = a;
    args_of_grid.chunk = backward_chunk(tiles, KV * B);
    const auto t = static_cast<unsigned>(tiles), kv = static_cast<unsigned>(KV), b = static_cast<unsigned>(B);
    const dim3 grid = args_of_grid.chunk == 0 ? dim3(t, kv, b) : dim3(t * kv * b);
    RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    kernel<<<grid, 128 * groups, smem_bytes, stream>>>(args_of_grid, extra...);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  // The lockstep kernel's shared memory: K, V, two stages of Q and dO, dS^T, two stages of lse and Dvec, and the slack
  // to align on 1024.
  const auto lockstep_bytes = [&](int groups) {
    const int keys = 64 * groups;
    return (2 * keys + 4 * kQueryRows) * D * 2 + keys * kQueryRows * 2 + 4 * kQueryRows * 4 + 1024;
  };
  // The pipelined kernel's: K and V of 128 keys, three stages of Q, dO, lse and Dvec, two buffers of dS^T, the dQ
  // rows of a step (bulk), five barriers and the slack (231,976 bytes at head size 128, of 232,448).
  const auto pipelined_bytes = [&](DqAdd dq) {
    return (256 + 6 * kQueryRows) * D * 2 + 2 * 128 * kQueryRows * 2 +
           (dq == DqAdd::FragmentBulk ? kQueryRows * D * 4 : 0) + 6 * kQueryRows * 4 + 5 * 8 + 1024;
  };
  // The pipelined schedule unless RETORT_FLASH_BACKWARD_SCHEDULE=lockstep; RETORT_FLASH_BACKWARD_KEYS=64 asks for the
  // lockstep kernel with one warpgroup a CTA at head size 64 (three CTAs a multiprocessor, twice the dQ atomics).
  // Both switches are there to measure the kernels against each other (docs/benchmarks.md).
  const bool lockstep = env_is("RETORT_FLASH_BACKWARD_SCHEDULE", "lockstep");
  if (D == 64 && env_is("RETORT_FLASH_BACKWARD_KEYS", "64")) {
    launch(wgmma_backward_kernel<64, 1>, 1, lockstep_bytes(1));
  } else if (lockstep) {
    if (D == 128)
      launch(wgmma_backward_kernel<128, 2>, 2, lockstep_bytes(2));
    else
      launch(wgmma_backward_kernel<64, 2>, 2, lockstep_bytes(2));
  } else {
    // dQ's additions (DqAdd): the bulk reductions at head size 128 and the 4-float atomics at 64, the faster of the
    // three at each on an H200 (docs/benchmarks.md); RETORT_FLASH_BACKWARD_DQ=rows|atomics|bulk picks one, to measure
    // them against each other.
    const char* dq_choice = std::getenv("RETORT_FLASH_BACKWARD_DQ");
    const std::string_view dq = dq_choice != nullptr ? dq_choice : D == 128 ? "bulk" : "atomics";
    // The loads by the copy engine (TMA) where the operands allow the maps (T a multiple of 4 for lse's and Dvec's;
    // 1.5-3.5% faster than every thread's cp.async on an H200, docs/benchmarks.md), unless
    // RETORT_FLASH_BACKWARD_LOADS=cp.async asks for those (to measure them against each other).
    BackwardMaps maps{};
    const int KVD = KV * D;
    const bool tma = !env_is("RETORT_FLASH_BACKWARD_LOADS", "cp.async") &&
                     tensor_map(&maps.q, a.q, a.q_stride, a.H * D, a.T, B, kQueryRows) &&
                     tensor_map(&maps.dout, a.dout, a.dout_stride, a.H * D, a.T, B, kQueryRows) &&
                     tensor_map(&maps.k, a.k, a.k_stride, KVD, a.T, B, 128) &&
                     tensor_map(&maps.v, a.v, a.v_stride, KVD, a.T, B, 128) &&
                     row_map(&maps.lse, a.lse, a.T, B * a.H, kQueryRows) &&
                     row_map(&maps.dvec, a.dvec, a.T, B * a.H, kQueryRows);
    const auto pick = [&](auto d_tag, auto dq_tag, auto tma_tag) {
      constexpr int kD = decltype(d_tag)::value;
      constexpr DqAdd kDq = decltype(dq_tag)::value;
      launch(wgmma_backward_pipelined_kernel<kD, kDq, decltype(tma_tag)::value>, 2, pipelined_bytes(kDq), maps);
    };
    const auto with_loads = [&](auto d_tag, auto dq_tag) {
      if (tma)
        pick(d_tag, dq_tag, std::true_type{});
      else
        pick(d_tag, dq_tag, std::false_type{});
    };
    const auto run = [&](auto d_tag) {
      *layout = dq == "rows" ? DqLayout::Rows : DqLayout::Fragments;
      if (dq == "rows")
        with_loads(d_tag, std::integral_constant<DqAdd, DqAdd::RowAtomics>{});
      else if (dq == "bulk")
        with_loads(d_tag, std::integral_constant<DqAdd, DqAdd::FragmentBulk>{});
      else
        with_loads(d_tag, std::integral_constant<DqAdd, DqAdd::FragmentAtomics>{});
    };
    if (D == 128)
      run(std::integral_constant<int, 128>{});
    else
      run(std::integral_constant<int, 64>{});
  }
  return true;
#else
  (void)args, (void)D, (void)B, (void)KV, (void)stream, (void)layout;
  return false;
#endif
}

}  // namespace retort::kernels::cuda::flash
