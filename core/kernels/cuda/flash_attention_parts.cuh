#pragma once
// What the fused attention's two forward kernels (mma.sync in flash_attention.cu, wgmma in
// flash_attention_wgmma.cu) and its backward share: the forward's arguments, fragment packing, and quad reductions.
#include <cuda_bf16.h>

#include <cstdint>

namespace retort::kernels::cuda::flash {

using bf16 = __nv_bfloat16;

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
};

// Two floats as a bf16 pair, the first in the low half (the lower column of an mma fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The C fragments of two adjacent 16x8 products (columns 16 kk .. 16 kk + 15 of a 16-row block) as the A fragment
// of the next product: the accumulator layout of m16n8 is the operand layout of m16k16, pair by pair.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Max and sum over the 4 lanes of a quad: the lanes holding one row of an mma fragment.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Runs the wgmma forward (flash_attention_wgmma.cu) for head size D over B batches when this build and device
// have it (sm_90a code, a compute capability 9.0 GPU); false when they do not, and the caller runs its own.
bool forward_wgmma(const ForwardArgs& a, int D, int B, cudaStream_t stream);

}  // namespace retort::kernels::cuda::flash
