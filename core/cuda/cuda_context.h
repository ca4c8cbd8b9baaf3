#pragma once
// CUDA-side context: the per-device compute stream and library handles, and the checks that turn every
// CUDA / cuBLAS status into an exception naming the call site. Only for code built with CUDA.
#ifdef RETORT_WITH_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <optional>

#include "core/tensor/device.h"
#include "core/util/error.h"

namespace retort::cuda {

// The stream all retort work on `device` is ordered on (a non-blocking stream created on first use).
cudaStream_t compute_stream(int device);
cudaStream_t current_stream();  // compute stream of the current device
// Whether the current device's compute stream is being recorded into a CUDA graph (no host waits then).
bool stream_capturing();
int current_device();
cublasHandle_t cublas_handle();  // bound to the current device's compute stream
cublasLtHandle_t cublaslt_handle();
void* cublas_workspace(size_t* nbytes);  // per-device workspace for cuBLASLt

// Properties of `device`, read once and cached (multiprocessor count, shared-memory limits).
const cudaDeviceProp& device_properties(int device);

// Makes a device current for the scope and restores the previous one afterwards: kernels, library calls and
// the compute stream all follow the current device, so every entry point takes its tensors' device first.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// Kernels that index memory with data (token ids, targets) record a bad index here instead of touching
// memory out of bounds: the first offender's value and position, and how many there were.
struct DeviceErrorRecord {
  int count;
  int value;
  long long position;
};
// The current device's record, in device memory, zeroed at start.
DeviceErrorRecord* device_error_record();
// Waits for the current device's compute stream and returns (and clears) the record when a kernel filled
// it. While the stream is being captured into a graph it cannot wait: it returns nothing, the record stays
// set, and the next call outside capture reports it.
std::optional<DeviceErrorRecord> take_device_error();

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// A device buffer for scratch space inside one kernel launch sequence, on the current device, from the allocator
// every tensor uses (device_runtime: the stream-ordered pool, or a capture arena while a CUDA graph is recorded).
class ScratchBuffer {
 public:
  explicit ScratchBuffer(size_t nbytes);
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
  int device_ = 0;
};

}  // namespace retort::cuda

#define RETORT_CUDA_CHECK(call)                                                    \
  do {                                                                             \
    cudaError_t retort_status_ = (call);                                           \
    if (retort_status_ != cudaSuccess) [[unlikely]]                                \
      ::retort::cuda::throw_cuda_error(retort_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define RETORT_CUBLAS_CHECK(call)                                                    \
  do {                                                                               \
    cublasStatus_t retort_status_ = (call);                                          \
    if (retort_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                        \
      ::retort::cuda::throw_cublas_error(retort_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: launch-configuration errors surface at the call site.
#define RETORT_CUDA_CHECK_LAUNCH() RETORT_CUDA_CHECK(cudaGetLastError())

#endif  // RETORT_WITH_CUDA
