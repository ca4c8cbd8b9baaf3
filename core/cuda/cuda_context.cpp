#include "core/cuda/cuda_context.h"

#ifdef RETORT_WITH_CUDA
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/tensor/device_runtime.h"

namespace retort::cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

struct DeviceContext {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;
  DeviceErrorRecord* error_record = nullptr;
  cudaDeviceProp properties{};
};

std::array<DeviceContext, kMaxDevices>& contexts() {
  static std::array<DeviceContext, kMaxDevices> all;
  return all;
}

DeviceContext& context(int device) {
  RETORT_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index {} out of range", device);
  DeviceContext& ctx = contexts()[device];
  std::call_once(ctx.once, [&] {
    int previous = 0;
    RETORT_CUDA_CHECK(cudaGetDevice(&previous));
    RETORT_CUDA_CHECK(cudaSetDevice(device));
    RETORT_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    // Keep freed blocks in the pool: training frees and re-allocates the same sizes every step.
    cudaMemPool_t pool;
    RETORT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    RETORT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    RETORT_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
    RETORT_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
    // Full-precision float32 GEMMs unless a caller asks for a reduced-precision math mode.
    RETORT_CUBLAS_CHECK(cublasSetMathMode(ctx.cublas, CUBLAS_DEFAULT_MATH));
    RETORT_CUBLAS_CHECK(cublasLtCreate(&ctx.cublaslt));
    RETORT_CUDA_CHECK(cudaMalloc(&ctx.workspace, kCublasWorkspaceBytes));
    RETORT_CUBLAS_CHECK(cublasSetWorkspace(ctx.cublas, ctx.workspace, kCublasWorkspaceBytes));
    RETORT_CUDA_CHECK(cudaMalloc(&ctx.error_record, sizeof(DeviceErrorRecord)));
    RETORT_CUDA_CHECK(cudaMemset(ctx.error_record, 0, sizeof(DeviceErrorRecord)));
    RETORT_CUDA_CHECK(cudaGetDeviceProperties(&ctx.properties, device));
    RETORT_CUDA_CHECK(cudaSetDevice(previous));
  });
  return ctx;
}

}  // namespace

int current_device() {
  int device = 0;
  RETORT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

cudaStream_t compute_stream(int device) {
  return context(device).stream;
}
cudaStream_t current_stream() {
  return compute_stream(current_device());
}
cublasHandle_t cublas_handle() {
  return context(current_device()).cublas;
}
cublasLtHandle_t cublaslt_handle() {
  return context(current_device()).cublaslt;
}
void* cublas_workspace(size_t* nbytes) {
  *nbytes = kCublasWorkspaceBytes;
  return context(current_device()).workspace;
}

const cudaDeviceProp& device_properties(int device) {
  return context(device).properties;
}

DeviceGuard::DeviceGuard(int device) {
  RETORT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    RETORT_CUDA_CHECK(cudaSetDevice(device));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);  // never throw from a destructor
}

DeviceErrorRecord* device_error_record() {
  return context(current_device()).error_record;
}

bool stream_capturing() {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RETORT_CUDA_CHECK(cudaStreamIsCapturing(context(current_device()).stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

std::optional<DeviceErrorRecord> take_device_error() {
  DeviceContext& ctx = context(current_device());
  if (stream_capturing()) return std::nullopt;
  DeviceErrorRecord record{};
  RETORT_CUDA_CHECK(cudaMemcpyAsync(&record, ctx.error_record, sizeof(record), cudaMemcpyDeviceToHost, ctx.stream));
  RETORT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (record.count == 0) return std::nullopt;
  RETORT_CUDA_CHECK(cudaMemsetAsync(ctx.error_record, 0, sizeof(DeviceErrorRecord), ctx.stream));
  return record;
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(status), cudaGetErrorString(status),
                          call, base ? base + 1 : file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", cublasGetStatusName(status),
                          cublasGetStatusString(status), call, base ? base + 1 : file, line));
}

ScratchBuffer::ScratchBuffer(size_t nbytes) : nbytes_(nbytes), device_(current_device()) {
  if (nbytes > 0) ptr_ = device_runtime::allocate(nbytes, Device::cuda(device_));
}

ScratchBuffer::~ScratchBuffer() {
  if (ptr_) device_runtime::release(ptr_, nbytes_, Device::cuda(device_));
}

}  // namespace retort::cuda
#endif  // RETORT_WITH_CUDA
