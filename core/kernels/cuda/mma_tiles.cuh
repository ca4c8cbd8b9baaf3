#pragma once
// Shared-memory tiles of bf16 rows for the mma.sync kernels (flash_attention.cu, attention_cache_mma.cu): the
// swizzled layout and the ldmatrix addresses of the products' operands in it.
#include "core/kernels/cuda/ptx.cuh"

namespace retort::kernels::cuda::tiles {
using detail::bf16;

// A tile of rows of kCols bf16, in 16-byte chunks whose index is XOR-ed with the row's low 3 bits: the 8 row
// addresses of one ldmatrix matrix (same column, consecutive rows) then fall in 8 different bank groups instead
// of one.
template <int kCols>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * kCols + ((chunk ^ (row & 7)) << 3);
}

// ldmatrix addresses. Lane l feeds row l % 8 of matrix l / 8.
// A operand (16x16 at rows r0, cols c0 of a row-major tile): matrices (r0, c0) (r0 + 8, c0) (r0, c0 + 8)
// (r0 + 8, c0 + 8) are a0 .. a3.
template <int kCols>
__device__ __forceinline__ uint32_t a_addr(const bf16* tile, int r0, int c0, int lane) {
  return ptx::smem_addr(tile + swizzle<kCols>(r0 + (lane & 15), (c0 >> 3) + (lane >> 4)));
}
// B operands of two n-tiles from a tile stored [n][k] (K for S = Q K^T): matrices (n0, k0) (n0, k0 + 8)
// (n0 + 8, k0) (n0 + 8, k0 + 8) are b0, b1 of n-tile n0 and b0, b1 of n-tile n0 + 8 (no transpose).
template <int kCols>
__device__ __forceinline__ uint32_t bt_addr(const bf16* tile, int n0, int k0, int lane) {
  const int m = lane >> 3;
  return ptx::smem_addr(tile + swizzle<kCols>(n0 + ((m >> 1) << 3) + (lane & 7), (k0 >> 3) + (m & 1)));
}
// B operands of two n-tiles from a tile stored [k][n] (V for O = P V), loaded with .trans: matrices (k0, n0)
// (k0 + 8, n0) (k0, n0 + 8) (k0 + 8, n0 + 8).
template <int kCols>
__device__ __forceinline__ uint32_t b_addr(const bf16* tile, int k0, int n0, int lane) {
  const int m = lane >> 3;
  return ptx::smem_addr(tile + swizzle<kCols>(k0 + ((m & 1) << 3) + (lane & 7), (n0 >> 3) + (m >> 1)));
}
// A operand (16x16 at rows r0, cols c0) of a matrix stored transposed, [col][row] (dS^T for dQ = dS K), with
// .trans: matrices (c0, r0) (c0, r0 + 8) (c0 + 8, r0) (c0 + 8, r0 + 8) of the stored tile are a0 .. a3.
template <int kCols>
__device__ __forceinline__ uint32_t at_addr(const bf16* tile, int r0, int c0, int lane) {
  const int m = lane >> 3;
  return ptx::smem_addr(tile + swizzle<kCols>(c0 + ((m >> 1) << 3) + (lane & 7), (r0 >> 3) + (m & 1)));
}

}  // namespace retort::kernels::cuda::tiles
