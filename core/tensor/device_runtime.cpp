#include "core/tensor/device_runtime.h"

#include <cstring>

#include "core/tensor/capture_arena.h"
#include "core/tensor/host_allocator.h"
#include "core/util/error.h"

#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#endif

namespace retort {

#ifdef RETORT_WITH_CUDA
namespace {
// Makes `device` current for the scope, restoring the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    RETORT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) RETORT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

bool cuda_available() {
  return cuda_device_count() > 0;
}
int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}
#else
bool cuda_available() {
  return false;
}
int cuda_device_count() {
  return 0;
}
#endif

namespace device_runtime {

#ifndef RETORT_WITH_CUDA
[[noreturn]] static void no_cuda() {
  throw Error("this retort build has no CUDA backend: rebuild on a machine with the CUDA toolkit (nvcc) to use a GPU");
}
#endif

void* allocate(size_t nbytes, Device device) {
  if (nbytes == 0) nbytes = 1;
  if (device.is_cpu()) return host_allocator::allocate(nbytes);
#ifdef RETORT_WITH_CUDA
  if (void* carved = CaptureArena::carve_if_open(nbytes, device)) return carved;
  DeviceGuard guard(device.index);
  void* ptr = nullptr;
  cudaError_t status = cudaMallocAsync(&ptr, nbytes, cuda::compute_stream(device.index));
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw Error(fmt::format("out of GPU memory on {} allocating {:.1f} MiB: reduce the batch size or sequence length",
                            device.str(), nbytes / 1048576.0));
  }
  RETORT_CUDA_CHECK(status);
  AllocationTally::add(ptr, nbytes);
  return ptr;
#else
  no_cuda();
#endif
}

void release(void* ptr, size_t nbytes, Device device) {
  if (!ptr) return;
  if (device.is_cpu()) {
    host_allocator::release(ptr, nbytes == 0 ? 1 : nbytes);
    return;
  }
#ifdef RETORT_WITH_CUDA
  if (CaptureArena::release_if_owned(ptr, nbytes)) return;  // the arena keeps it, or gives its block back whole
  AllocationTally::remove(ptr);
  DeviceGuard guard(device.index);
  cudaFreeAsync(ptr, cuda::compute_stream(device.index));  // never throw from a destructor path
#endif
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#ifdef RETORT_WITH_CUDA
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(device);
  cudaStream_t stream = cuda::compute_stream(device);
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    // Order after pending work on both devices.
    RETORT_CUDA_CHECK(cudaStreamSynchronize(cuda::compute_stream(src_device.index)));
    RETORT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
    RETORT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  RETORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  // Host memory here is pageable and may be freed right after we return: wait for the copy.
  if (dst_device.is_cpu() || src_device.is_cpu()) RETORT_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  no_cuda();
#endif
}

void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height,
             Device device) {
  if (width == 0 || height == 0) return;
  if (device.is_cpu()) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    for (size_t row = 0; row < height; ++row) std::memcpy(d + row * dst_pitch, s + row * src_pitch, width);
    return;
  }
#ifdef RETORT_WITH_CUDA
  DeviceGuard guard(device.index);
  RETORT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice,
                                      cuda::compute_stream(device.index)));
#else
  no_cuda();
#endif
}

void memset_zero(void* ptr, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    std::memset(ptr, 0, nbytes);
    return;
  }
#ifdef RETORT_WITH_CUDA
  DeviceGuard guard(device.index);
  RETORT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, cuda::compute_stream(device.index)));
#else
  no_cuda();
#endif
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
#ifdef RETORT_WITH_CUDA
  RETORT_CUDA_CHECK(cudaStreamSynchronize(cuda::compute_stream(device.index)));
#else
  no_cuda();
#endif
}

bool capturing(Device device) {
  if (device.is_cpu()) return false;
#ifdef RETORT_WITH_CUDA
  cuda::DeviceGuard guard(device);
  return cuda::stream_capturing();
#else
  no_cuda();
#endif
}

}  // namespace device_runtime
}  // namespace retort
