// Probe of wgmma.cuh's operand layouts: S = Q K^T (K-major both, 2 panels), O = P V (P regs, V MN-major).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/kernels/cuda/ptx.cuh"
#include "core/kernels/cuda/wgmma.cuh"
using namespace retort::kernels::cuda;
using bf16 = __nv_bfloat16;
constexpr int R = 64, N = 128, D = 128;

__device__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// mode 0: S = Q K^T -> out [64 x 128]; mode 1: O = P V (P = Q's first 128 cols as A regs from global), lbo_mode swaps
__global__ void probe(const bf16* q, const bf16* k, float* out, int mode, int swap) {
#if defined(RETORT_WGMMA_AVAILABLE)
  extern __shared__ unsigned char raw[];
  bf16* sq = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  bf16* sk = sq + R * D;
  for (int i = threadIdx.x; i < R * D; i += 128) sq[wgmma::swizzled_offset(R, i / D, i % D)] = q[i];
  for (int i = threadIdx.x; i < N * D; i += 128) sk[wgmma::swizzled_offset(N, i / D, i % D)] = k[i];
  wgmma::fence_async_shared();
  __syncthreads();
  float d[16][4];
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e) d[j][e] = 0.f;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if (mode == 0) {
    wgmma::fence();
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma(d, wgmma::descriptor(ptx::smem_addr(sq) + (kk >> 2) * R * 128 + (kk & 3) * 32),
                 wgmma::descriptor(ptx::smem_addr(sk) + (kk >> 2) * N * 128 + (kk & 3) * 32), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(d);
  } else {
    // A = q as [64 x 128] row-major from global, B = k as [128 (k) x 128 (n)], n contiguous.
    uint32_t a[8][4];
    const int r0 = 16 * warp + g;
    for (int kk = 0; kk < 8; ++kk) {
      auto at = [&](int r, int c) { return __bfloat162float(q[r * D + c]); };
      a[kk][0] = pack(at(r0, 16 * kk + 2 * t), at(r0, 16 * kk + 2 * t + 1));
      a[kk][1] = pack(at(r0 + 8, 16 * kk + 2 * t), at(r0 + 8, 16 * kk + 2 * t + 1));
      a[kk][2] = pack(at(r0, 16 * kk + 8 + 2 * t), at(r0, 16 * kk + 8 + 2 * t + 1));
      a[kk][3] = pack(at(r0 + 8, 16 * kk + 8 + 2 * t), at(r0 + 8, 16 * kk + 8 + 2 * t + 1));
    }
    wgmma::keep(d);
    wgmma::fence();
    for (int kk = 0; kk < 8; ++kk) {
      uint64_t desc = wgmma::descriptor(ptx::smem_addr(sk) + kk * 16 * 128, N * 128);
      if (swap) {  // LBO 1024, SBO = panel stride
        desc = (desc & ~(uint64_t(0x3FFF) << 16) & ~(uint64_t(0x3FFF) << 32)) | (uint64_t(1024 >> 4) << 16) |
               (uint64_t((N * 128) >> 4) << 32);
      }
      wgmma::mma<wgmma::Major::MN>(d, a[kk], desc, 1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(d);
  }
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * warp + g + 8 * (e >> 1), c = 8 * j + 2 * t + (e & 1);
      out[r * 128 + c] = d[j][e];
    }
#endif
}

int main() {
  std::vector<bf16> q(R * D), k(N * D);
  std::vector<float> qf(R * D), kf(N * D);
  srand(1);
  for (int i = 0; i < R * D; ++i) {
    q[i] = __float2bfloat16((rand() % 17 - 8) / 8.f);
    qf[i] = __bfloat162float(q[i]);
  }
  for (int i = 0; i < N * D; ++i) {
    k[i] = __float2bfloat16((rand() % 17 - 8) / 8.f);
    kf[i] = __bfloat162float(k[i]);
  }
  bf16 *dq, *dk;
  float* dout;
  cudaMalloc(&dq, q.size() * 2);
  cudaMalloc(&dk, k.size() * 2);
  cudaMalloc(&dout, 64 * 128 * 4);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 80000);
  int fails = 0;
  for (int mode = 0; mode < 2; ++mode)
    for (int swap = 0; swap < (mode ? 2 : 1); ++swap) {
      cudaMemset(dout, 0, 64 * 128 * 4);
      probe<<<1, 128, 80000>>>(dq, dk, dout, mode, swap);
      cudaError_t err = cudaDeviceSynchronize();
      std::vector<float> o(64 * 128);
      cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
      double worst = 0;
      for (int r = 0; r < 64; ++r)
        for (int c = 0; c < 128; ++c) {
          double ref = 0;
          for (int x = 0; x < 128; ++x)
            ref += mode == 0 ? double(qf[r * D + x]) * kf[c * D + x] : double(qf[r * D + x]) * kf[x * D + c];
          worst = std::fmax(worst, std::fabs(ref - o[r * 128 + c]));
        }
      printf("mode %d swap %d: %s max abs err %.3g\n", mode, swap, cudaGetErrorString(err), worst);
      if (worst > 1e-3) ++fails;
    }
  return fails;
}
