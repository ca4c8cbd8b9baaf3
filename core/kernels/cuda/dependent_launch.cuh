#pragma once
// Programmatic dependent launch (Hopper and later) for the decode kernels: a kernel launched with
// launch_dependent(..., true) may start while the kernel before it on the stream is still running, as soon as that
// kernel's blocks have all called allow_dependents(). Until it calls wait_for_prerequisites() it must not read
// anything an earlier kernel writes, nor write anything at all: the only work the decode kernels do there is to
// prefetch their weights into L2, which is coherent with every writer (a prefetch moves no data into the SM), so
// even a weight written by the kernel just before (a cast) is read correctly afterwards. The wait returns once the
// earlier kernels have finished and their writes are visible; it returns at once when the kernel was launched the
// ordinary way. On GPUs before Hopper these are no-ops and launches are ordinary.
// Include after common.cuh.
#include <cuda_runtime.h>

namespace retort::kernels::cuda::detail {

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Starts moving `bytes` (a multiple of 16) at a 16-byte aligned address into L2, without waiting.
__device__ __forceinline__ void prefetch_l2(const void* address, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(address), "r"(bytes) : "memory");
#else
  (void)address;
  (void)bytes;
#endif
}

// The first `bytes` (a multiple of 16) of two 16-byte aligned arrays towards L2, one thread of the block per 32 KiB:
// the cached keys and values a decode attention reads once the kernel before it is done.
__device__ __forceinline__ void prefetch_pair_l2(const void* first, const void* second, int64_t bytes) {
  constexpr int64_t kPiece = 32 * 1024;
  for (int64_t at = threadIdx.x * kPiece; at < bytes; at += blockDim.x * kPiece) {
    const uint32_t piece = static_cast<uint32_t>(bytes - at < kPiece ? bytes - at : kPiece);
    prefetch_l2(static_cast<const char*>(first) + at, piece);
    prefetch_l2(static_cast<const char*>(second) + at, piece);
  }
}

// Whether the current device can launch kernels programmatically dependent on the one before (compute 9.0+).
inline bool dependent_launch_supported() {
  return rc::device_properties(rc::current_device()).major >= 9;
}

// kernel<<<grid, block, shared, stream>>>(args...), marked as a programmatic dependent of the previous kernel on
// the stream when `dependent`.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                      bool dependent, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent ? 1 : 0;
  RETORT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace retort::kernels::cuda::detail
