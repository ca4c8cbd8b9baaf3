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
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = warp >> 2;
  const int g = lane >> 2, tig = lane & 3;
  const int q0 = q_tile * kRows;
  const int group_first = q0 + 64 * group, group_last = group_first + 63;
  const int row = group_first + 16 * (warp & 3) + g;  // this thread's rows: row and row + 8
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
  const uint32_t q_addr = smem_addr(sq) + group * 64 * 128;

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
    if (k0 > group_last) continue;  // every score of this warpgroup's rows masked
    const uint32_t k_addr = smem_addr(sk + (j & 1) * kKeys * D);
    const uint32_t v_addr = smem_addr(sv + (j & 1) * kKeys * D);

    // S = Q K^T: panel kk / 4 of each, 32 bytes a step of 16 within a panel.
    float s[kKeys / 8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t step = (kk & 3) * 32;
      wgmma::mma(s, wgmma::descriptor(q_addr + (kk >> 2) * kRows * 128 + step),
                 wgmma::descriptor(k_addr + (kk >> 2) * kKeys * 128 + step), kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(s);

    // Key > query masked where the tile reaches past the warpgroup's first row (keys past T are among them).
    if (k0 + kKeys - 1 > group_first) {
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
      wgmma::mma<wgmma::Major::MN>(o, p[kk], wgmma::descriptor(v_addr + kk * 16 * 128, kKeys * 128), 1);
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

}  // namespace

bool forward_wgmma(const ForwardArgs& a, int D, int B, cudaStream_t stream) {
#if defined(RETORT_CUDA_SM90A)
  int device = 0, major = 0, minor = 0;
  RETORT_CUDA_CHECK(cudaGetDevice(&device));
  RETORT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  RETORT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
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

}  // namespace retort::kernels::cuda::flash
