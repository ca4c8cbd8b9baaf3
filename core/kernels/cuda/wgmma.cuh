#pragma once
// Hopper's warpgroup products (wgmma.mma_async, sm_90a only): D[64 x N] (+)= A[64 x 16] B[16 x N] in bf16 with
// float32 accumulation, issued by the 4 warps of a warpgroup together and run asynchronously. B always comes from
// shared memory through a 64-bit descriptor; A from shared memory too, or from registers in the mma.sync A layout
// (warp w of the group holding rows 16 w .. 16 w + 15), which lets an accumulator become the next product's A.
//
// Shared-memory operands use the 128-byte swizzle: a tile is kept as panels of 64 bf16 a row (128 bytes), and in
// every 8 rows (1024 bytes, aligned to 1024) the 16-byte chunk c of row r sits at chunk c ^ (r % 8). The hardware
// applies the same XOR to the address bits, so a descriptor may start 32 bytes into a row to reach k = 16, 32, 48.
//   K-major (contiguous along the reduced dimension; Q and K for S = Q K^T): 8-row groups are 1024 bytes apart
//   (stride byte offset); one product reads 16 k of one panel, so the leading byte offset is unused.
//   MN-major (contiguous along N; V for O = P V, passed with the transpose bit): a row is one k, 8 k rows make a
//   1024-byte group (stride byte offset), and the panels of 64 n are `panel_bytes` apart (leading byte offset).
//
// Register accumulators: d[j][e] is the C fragment of columns 8 j .. 8 j + 7, the mma.sync m16n8 layout of the
// warp's 16 rows (e 0, 1: row g, columns 2 t, 2 t + 1; e 2, 3: row g + 8), for lane = 4 g + t.
//
// Ordering: wgmma reads shared memory through the async proxy, so writes made by threads (cp.async included) are
// fenced with fence_async_shared() before the barrier that publishes them. fence() orders the warpgroup's earlier
// register accesses to the accumulators before the next products; commit() closes a group; wait<N>() waits until
// at most N groups are still running. keep() stops the compiler moving accumulator reads or writes across them.
#include <cstdint>

namespace retort::kernels::cuda::wgmma {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RETORT_WGMMA_AVAILABLE 1
#endif

enum class Major { K, MN };

// Descriptor of a 128-byte-swizzled operand starting at shared address `addr` (see above for the offsets).
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t panel_bytes = 0) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>(addr >> 4);                          // bits 0-13: start address / 16 (< 256 KiB)
  d |= static_cast<uint64_t>((panel_bytes >> 4) & 0x3FFF) << 16;  // bits 16-29: leading byte offset / 16
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                    // bits 32-45: stride byte offset / 16
  d |= static_cast<uint64_t>(1) << 62;                            // bits 62-63: 1 = 128-byte swizzle
  return d;
}

// The descriptor of the operand `bytes` further on (a multiple of 16 that keeps the start below 256 KiB, so the
// start address field does not carry): one add instead of building it again.
__device__ __forceinline__ uint64_t advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Element offset of (row, col) in a tile of `rows` rows kept as 128-byte-swizzled panels of 64 columns.
__host__ __device__ __forceinline__ int swizzled_offset(int rows, int row, int col) {
  const int panel = col >> 6, chunk = (col >> 3) & 7;
  return panel * rows * 64 + row * 64 + ((chunk ^ (row & 7)) << 3) + (col & 7);
}

#if defined(RETORT_WGMMA_AVAILABLE)
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <int kN>
__device__ __forceinline__ void keep(float (&d)[kN][4]) {
#pragma unroll
  for (int j = 0; j < kN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

#define RETORT_ACC4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define RETORT_ACC16 RETORT_ACC4(0), RETORT_ACC4(1), RETORT_ACC4(2), RETORT_ACC4(3)
#define RETORT_ACC32                                                                                              \
  RETORT_ACC4(0), RETORT_ACC4(1), RETORT_ACC4(2), RETORT_ACC4(3), RETORT_ACC4(4), RETORT_ACC4(5), RETORT_ACC4(6), \
      RETORT_ACC4(7)
#define RETORT_ACC64                                                                                                \
  RETORT_ACC32, RETORT_ACC4(8), RETORT_ACC4(9), RETORT_ACC4(10), RETORT_ACC4(11), RETORT_ACC4(12), RETORT_ACC4(13), \
      RETORT_ACC4(14), RETORT_ACC4(15)
#define RETORT_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define RETORT_REGS32                                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define RETORT_REGS64                                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "  \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// mma_ss: d (+)= A B with A and B in shared memory, each K-major or (kAMajor, kBMajor MN) MN-major. accumulate = 0
// overwrites d.
template <Major kAMajor = Major::K, Major kBMajor = Major::K>
__device__ __forceinline__ void mma_ss(float (&d)[4][4], uint64_t a, uint64_t b, int accumulate) {
  constexpr int kTransA = kAMajor == Major::MN ? 1 : 0, kTransB = kBMajor == Major::MN ? 1 : 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " RETORT_REGS16 ", %16, %17, p, 1, 1, %19, %20;\n}\n"
      : RETORT_ACC16
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}
template <Major kAMajor = Major::K, Major kBMajor = Major::K>
__device__ __forceinline__ void mma_ss(float (&d)[8][4], uint64_t a, uint64_t b, int accumulate) {
  constexpr int kTransA = kAMajor == Major::MN ? 1 : 0, kTransB = kBMajor == Major::MN ? 1 : 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " RETORT_REGS32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
      : RETORT_ACC32
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}
template <Major kAMajor = Major::K, Major kBMajor = Major::K>
__device__ __forceinline__ void mma_ss(float (&d)[16][4], uint64_t a, uint64_t b, int accumulate) {
  constexpr int kTransA = kAMajor == Major::MN ? 1 : 0, kTransB = kBMajor == Major::MN ? 1 : 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " RETORT_REGS64 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
      : RETORT_ACC64
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));
}

// mma_rs: d (+)= A B with A in registers (the warp's 16 x 16 block as for mma.sync) and B in shared memory.
template <Major kBMajor = Major::K>
__device__ __forceinline__ void mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  constexpr int kTransB = kBMajor == Major::MN ? 1 : 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " RETORT_REGS32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : RETORT_ACC32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
}
template <Major kBMajor = Major::K>
__device__ __forceinline__ void mma_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  constexpr int kTransB = kBMajor == Major::MN ? 1 : 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " RETORT_REGS64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : RETORT_ACC64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
}

#undef RETORT_ACC4
#undef RETORT_ACC16
#undef RETORT_ACC32
#undef RETORT_ACC64
#undef RETORT_REGS16
#undef RETORT_REGS32
#undef RETORT_REGS64
#endif  // RETORT_WGMMA_AVAILABLE

}  // namespace retort::kernels::cuda::wgmma
