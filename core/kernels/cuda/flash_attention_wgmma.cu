// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused causal attention's forward on Hopper's warpgroup products (wgmma, sm_90a): the same result and saved
// log-sum-exp as the mma.sync kernel in flash_attention.cu, which stays for other GPUs.
//
// One CTA of two warpgroups takes 128 query rows of one head, 64 a warpgroup, and walks the key tiles (kKeys keys)
// up to the diagonal with the online softmax. Per tile and warpgroup: S[64 x kKeys] = Q K^T as D / 16 products
// with both operands in shared memory; the running max and sum in registers; then O[64 x D] += P V with P taken
// straight from S's registers as the A operand and V read MN-major from shared memory (the transpose bit), so P
// never touches shared memory. Q, K and V sit in shared memory as 128-byte-swizzled panels (wgmma.cuh); K and V
// are double-buffered with cp.async, the next tile's copies running under this tile's products.
#include "core/kernels/cuda/flash_attention_parts.cuh"
#include "core/kernels/cuda/ptx.cuh"
#include "core/kernels/cuda/wgmma.cuh"

namespace retort::kernels::cuda::flash {
namespace {
using namespace ptx;

constexpr int kRows = 128;  // query rows a CTA
constexpr int kThreads = 256;

// Rows [0, kTileRows) of a [.., stride] bf16 matrix starting at src into a swizzled tile of D columns; rows >= valid
// are zeros.
template <int D, int kTileRows>
__device__ __forceinline__ void load_swizzled(bf16* tile, const bf16* src, int64_t stride, int valid) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kTileRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    cp_async16(smem_addr(tile + wgmma::swizzled_offset(kTileRows, r, c * 8)), src + (ok ? r : 0) * stride + c * 8, ok);
  }
}

template <int D, int kKeys>
__global__ void __launch_bounds__(kThreads, 1) wgmma_forward_kernel(const ForwardArgs a) {
#if defined(RETORT_WGMMA_AVAILABLE)
  extern __shared__ unsigned char smem_raw[];
  // Swizzled operands start on 1024 bytes (the launch asks for the slack).
  bf16* sq = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  bf16* sk = sq + kRows * D;      // 2 stages
  bf16* sv = sk + 2 * kKeys * D;  // 2 stages
  // The longest rows (the last query tiles) start first, so the short ones fill the tail of the grid.
  const int q_tile = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / a.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int q0 = q_tile * kRows;
  const int wg_first = q0 + 64 * wg, wg_last = wg_first + 63;
  const int row = wg_first + 16 * (warp & 3) + g;  // this thread's rows: row and row + 8
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const bf16* kbase = a.k + row0 * a.k_stride + kvh * D;
  const bf16* vbase = a.v + row0 * a.v_stride + kvh * D;

  load_swizzled<D, kRows>(sq, a.q + (row0 + q0) * a.q_stride + h * D, a.q_stride, a.T - q0);
  load_swizzled<D, kKeys>(sk, kbase, a.k_stride, a.T);
  load_swizzled<D, kKeys>(sv, vbase, a.v_stride, a.T);
  cp_async_commit();

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this thread's part of the row sum
  const uint32_t q_addr = smem_addr(sq) + wg * 64 * 128;

  // Key tiles up to the last row's diagonal, none wholly past T.
  const int tiles = min((q0 + kRows - 1) / kKeys + 1, (a.T + kKeys - 1) / kKeys);
  for (int j = 0; j < tiles; ++j) {
    cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();  // tile j is in; every warpgroup is done with tile j - 1's stage
    if (j + 1 < tiles) {
      const int k1 = (j + 1) * kKeys;
      load_swizzled<D, kKeys>(sk + ((j + 1) & 1) * kKeys * D, kbase + k1 * a.k_stride, a.k_stride, a.T - k1);
      load_swizzled<D, kKeys>(sv + ((j + 1) & 1) * kKeys * D, vbase + k1 * a.v_stride, a.v_stride, a.T - k1);
      cp_async_commit();
    }
    const int k0 = j * kKeys;
    if (k0 > wg_last) continue;  // every score of this warpgroup's rows masked
    const uint32_t k_addr = smem_addr(sk + (j & 1) * kKeys * D);
    const uint32_t v_addr = smem_addr(sv + (j & 1) * kKeys * D);

    // S = Q K^T: panel kk / 4 of each, 32 bytes a step of 16 within a panel.
    float s[kKeys / 8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t step = (kk & 3) * 32;
      wgmma::mma_ss(s, wgmma::descriptor(q_addr + (kk >> 2) * kRows * 128 + step),
                    wgmma::descriptor(k_addr + (kk >> 2) * kKeys * 128 + step), kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(s);

    // Key > query masked where the tile reaches past the warpgroup's first row (keys past T are among them).
    if (k0 + kKeys - 1 > wg_first) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + n * 8 + 2 * tig + (e & 1) > row + (e >> 1) * 8) s[n][e] = -INFINITY;
    }
    // Online softmax in base 2: m is the running max of the scaled scores. Every row sees a key <= it in each tile
    // it visits (tiles and warpgroups are aligned), so the max is finite.
    uint32_t p[kKeys / 16][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(m[r], quad_max(mx) * a.scale_log2);
      const float correction = exp2f(m[r] - mx);  // 0 on the first tile (m = -inf)
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][2 * r] = exp2f(fmaf(s[n][2 * r], a.scale_log2, -mx));
        s[n][2 * r + 1] = exp2f(fmaf(s[n][2 * r + 1], a.scale_log2, -mx));
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l[r] = l[r] * correction + sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= correction;
        o[n][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) c_to_a(p[kk], s[2 * kk], s[2 * kk + 1]);

    // O += P V: 16 keys a step, V's rows 2048 bytes apart, its panels of 64 columns kKeys rows apart.
    wgmma::keep(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      wgmma::mma_rs<wgmma::Major::MN>(o, p[kk], wgmma::descriptor(v_addr + kk * 16 * 128, kKeys * 128), 1);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(o);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    const float inv = 1.f / sum;
    const int t = row + r * 8;
    if (t >= a.T) continue;
    bf16* dst = a.out + (row0 + t) * a.out_stride + h * D + 2 * tig;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (tig == 0) a.lse[(static_cast<int64_t>(b) * a.H + h) * a.T + t] = (m[r] + log2f(sum)) * kLn2;
  }
#endif  // RETORT_WGMMA_AVAILABLE
}

// Backward (the recomputation of FlashAttention-2, as the mma.sync kernel in flash_attention.cu) on warpgroup
// products. One CTA of two warpgroups holds 128 keys of one key/value head, 64 a warpgroup, and walks every 64-row
// query tile at or below the diagonal of every query head of its group. Per tile, each warpgroup for its 64 keys:
// S^T = K Q^T and dP^T = V dO^T (both operands in shared memory, K-major); P^T = exp2(S^T scale - lse) masked,
// dS^T = P^T (dP^T - Dvec) in registers; dV += P^T dO and dK += dS^T Q with P^T and dS^T as register A operands and
// dO, Q read MN-major, accumulating in registers over the whole walk. dS^T goes to shared memory ([key][query]) for
// dQ = dS K over the CTA's 128 keys (dS read MN-major as A, K MN-major as B), each warpgroup taking half of D's
// columns, added into the float32 dQ buffer with 16-byte atomics. Q, dO, lse and Dvec are double-buffered with
// cp.async.
constexpr int kKeyRows = 128;   // keys a backward CTA
constexpr int kQueryRows = 64;  // query rows a backward tile

// kQueryRows floats of a row vector (lse or Dvec) from src; entries >= valid are zeros.
__device__ __forceinline__ void load_vector(float* dst, const float* src, int valid) {
  for (int i = threadIdx.x; i < kQueryRows; i += kThreads)
    cp_async4(smem_addr(dst + i), src + (i < valid ? i : 0), i < valid);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) wgmma_backward_kernel(const BackwardArgs a) {
#if defined(RETORT_WGMMA_AVAILABLE)
  constexpr int kHalf = D / 2;  // dQ columns a warpgroup
  extern __shared__ unsigned char smem_raw[];
  bf16* sk = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  bf16* sv = sk + kKeyRows * D;
  bf16* sq = sv + kKeyRows * D;                                         // 2 stages
  bf16* sdo = sq + 2 * kQueryRows * D;                                  // 2 stages
  bf16* sds = sdo + 2 * kQueryRows * D;                                 // dS^T [key][query], kKeyRows x kQueryRows
  float* slse = reinterpret_cast<float*>(sds + kKeyRows * kQueryRows);  // 2 stages
  float* sdvec = slse + 2 * kQueryRows;                                 // 2 stages

  const int k_tile = blockIdx.x;  // the first key tiles see the most query tiles: they start first
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int k0 = k_tile * kKeyRows;
  const int key_first = k0 + 64 * wg;  // this warpgroup's keys
  const int kr = 16 * (warp & 3) + g;  // this thread's key rows kr, kr + 8 within them
  const int64_t row0 = static_cast<int64_t>(b) * a.T;
  const int q_tiles = (a.T + kQueryRows - 1) / kQueryRows;
  const int first_q_tile = k0 / kQueryRows;  // the query tile holding the first key's diagonal
  const int per_head = q_tiles - first_q_tile;
  const int steps = a.group * per_head;

  // Step i: query head kvh * group + i / per_head, query tile first_q_tile + i % per_head.
  auto load_step = [&](int i) {
    const int h = kvh * a.group + i / per_head;
    const int q0 = (first_q_tile + i % per_head) * kQueryRows;
    const int stage = i & 1;
    load_swizzled<D, kQueryRows>(sq + stage * kQueryRows * D, a.q + (row0 + q0) * a.q_stride + h * D, a.q_stride,
                                 a.T - q0);
    load_swizzled<D, kQueryRows>(sdo + stage * kQueryRows * D, a.dout + (row0 + q0) * a.dout_stride + h * D,
                                 a.dout_stride, a.T - q0);
    const int64_t vec0 = (static_cast<int64_t>(b) * a.H + h) * a.T + q0;
    load_vector(slse + stage * kQueryRows, a.lse + vec0, a.T - q0);
    load_vector(sdvec + stage * kQueryRows, a.dvec + vec0, a.T - q0);
  };

  load_swizzled<D, kKeyRows>(sk, a.k + (row0 + k0) * a.k_stride + kvh * D, a.k_stride, a.T - k0);
  load_swizzled<D, kKeyRows>(sv, a.v + (row0 + k0) * a.v_stride + kvh * D, a.v_stride, a.T - k0);
  load_step(0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
  const uint32_t k_addr = smem_addr(sk), v_addr = smem_addr(sv), ds_addr = smem_addr(sds);
  const uint32_t k_rows_addr = k_addr + wg * 64 * 128, v_rows_addr = v_addr + wg * 64 * 128;
  const uint32_t k_cols_addr = k_addr + (wg * kHalf / 64) * kKeyRows * 128 + (wg * kHalf % 64) * 2;

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
    const float* slse_i = slse + stage * kQueryRows;
    const float* sdvec_i = sdvec + stage * kQueryRows;
    const int h = kvh * a.group + i / per_head;
    const int q0 = (first_q_tile + i % per_head) * kQueryRows;

    // A warpgroup whose keys all follow the tile's last query has P = 0: it only writes its zero dS^T rows.
    if (key_first <= q0 + kQueryRows - 1) {
      float s[8][4], dp[8][4];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk & 3) * 32;
        wgmma::mma_ss(s, wgmma::descriptor(k_rows_addr + (kk >> 2) * kKeyRows * 128 + off),
                      wgmma::descriptor(q_addr + (kk >> 2) * kQueryRows * 128 + off), kk > 0);
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk & 3) * 32;
        wgmma::mma_ss(dp, wgmma::descriptor(v_rows_addr + (kk >> 2) * kKeyRows * 128 + off),
                      wgmma::descriptor(do_addr + (kk >> 2) * kQueryRows * 128 + off), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::keep(s);
      wgmma::keep(dp);

      // P^T = exp2(S^T scale_log2 - lse log2 e), 0 where key > query; dS^T = P^T (dP^T - Dvec).
      const bool masking = key_first + 63 > q0;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = n * 8 + 2 * tig + (e & 1);  // query column within the tile
          float p = exp2f(fmaf(s[n][e], a.scale_log2, -slse_i[qc] * kLog2e));
          if (masking && key_first + kr + (e >> 1) * 8 > q0 + qc) p = 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - sdvec_i[qc]);
        }
      uint32_t pa[4][4], dsa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        c_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
        c_to_a(dsa[kk], dp[2 * kk], dp[2 * kk + 1]);
      }
      // dV += P^T dO and dK += dS^T Q over the tile's 64 queries (16 a step, rows 2048 bytes apart).
      wgmma::keep(dv);
      wgmma::keep(dk);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::mma_rs<wgmma::Major::MN>(dv, pa[kk], wgmma::descriptor(do_addr + kk * 16 * 128, kQueryRows * 128), 1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma::mma_rs<wgmma::Major::MN>(dk, dsa[kk], wgmma::descriptor(q_addr + kk * 16 * 128, kQueryRows * 128), 1);
      wgmma::commit();
      // dS^T rows kr (+ 8) of this warpgroup, query columns 16 kk + 2 tig (+ 8): the A fragment's own layout.
      bf16* rows = sds + 64 * wg * kQueryRows;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr, 16 * kk + 2 * tig)) = dsa[kk][0];
        *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr + 8, 16 * kk + 2 * tig)) = dsa[kk][1];
        *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr, 16 * kk + 8 + 2 * tig)) = dsa[kk][2];
        *reinterpret_cast<uint32_t*>(rows + wgmma::swizzled_offset(kKeyRows, kr + 8, 16 * kk + 8 + 2 * tig)) =
            dsa[kk][3];
      }
      wgmma::wait<0>();
      wgmma::keep(dv);
      wgmma::keep(dk);
    } else {
      bf16* rows = sds + 64 * wg * kQueryRows;
      for (int x = threadIdx.x & 127; x < 64 * kQueryRows / 8; x += 128)
        *reinterpret_cast<uint4*>(rows + x * 8) = make_uint4(0, 0, 0, 0);
    }
    wgmma::fence_async_shared();
    __syncthreads();  // dS^T is whole

    // dQ[64 x kHalf] = dS K over the 128 keys: this warpgroup's half of the columns, which starts in K's panel
    // wg kHalf / 64, (wg kHalf) % 64 columns in.
    float dq[kHalf / 8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kKeyRows / 16; ++kk)
      wgmma::mma_ss<wgmma::Major::MN, wgmma::Major::MN>(
          dq, wgmma::descriptor(ds_addr + kk * 16 * 128, kKeyRows * kQueryRows * 2),
          wgmma::descriptor(k_cols_addr + kk * 16 * 128, kKeyRows * 128), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(dq);
    const int t = q0 + 16 * (warp & 3) + g;
    float* row_g = a.dq + ((row0 + t) * a.H + h) * D + wg * kHalf;
    add_dq<kHalf>(dq, row_g, row_g + 8 * a.H * D, tig, t < a.T, t + 8 < a.T);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = key_first + kr + r * 8;
    if (t >= a.T) continue;
    bf16* dk_dst = a.dk + (row0 + t) * a.dk_stride + kvh * D + 2 * tig;
    bf16* dv_dst = a.dv + (row0 + t) * a.dv_stride + kvh * D + 2 * tig;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk_dst + n * 8) = pack_bf16(dk[n][2 * r] * a.scale, dk[n][2 * r + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(dv_dst + n * 8) = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
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
}  // namespace
#endif

bool forward_wgmma(const ForwardArgs& a, int D, int B, cudaStream_t stream) {
#if defined(RETORT_CUDA_SM90A)
  if (!hopper()) return false;
  constexpr int kKeys = 128;
  const dim3 grid(static_cast<unsigned>((a.T + kRows - 1) / kRows), static_cast<unsigned>(a.H),
                  static_cast<unsigned>(B));
  const int smem_bytes = (kRows + 4 * kKeys) * D * 2 + 1024;
  auto launch = [&](auto kernel) {
    RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    kernel<<<grid, kThreads, smem_bytes, stream>>>(a);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  if (D == 64) {
    launch(wgmma_forward_kernel<64, kKeys>);
  } else {
    launch(wgmma_forward_kernel<128, kKeys>);
  }
  return true;
#else
  (void)a, (void)D, (void)B, (void)stream;
  return false;
#endif
}

bool backward_wgmma(const BackwardArgs& a, int D, int B, int KV, cudaStream_t stream) {
#if defined(RETORT_CUDA_SM90A)
  if (!hopper()) return false;
  const dim3 grid(static_cast<unsigned>((a.T + kKeyRows - 1) / kKeyRows), static_cast<unsigned>(KV),
                  static_cast<unsigned>(B));
  // K, V, two stages of Q and dO, dS^T, two stages of lse and Dvec, and the slack to align on 1024.
  const int smem_bytes =
      (2 * kKeyRows + 4 * kQueryRows) * D * 2 + kKeyRows * kQueryRows * 2 + 4 * kQueryRows * 4 + 1024;
  auto launch = [&](auto kernel) {
    RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    kernel<<<grid, kThreads, smem_bytes, stream>>>(a);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  if (D == 64) {
    launch(wgmma_backward_kernel<64>);
  } else {
    launch(wgmma_backward_kernel<128>);
  }
  return true;
#else
  (void)a, (void)D, (void)B, (void)KV, (void)stream;
  return false;
#endif
}

}  // namespace retort::kernels::cuda::flash
