#include "bench/harness/step_timer.h"

#include "bench/harness/host_clock.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cuda_context.h"
#endif

namespace retort::bench {

StepTimer::StepTimer(Device device) : device_(device) {
#ifdef RETORT_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::DeviceGuard guard(device_);
    RETORT_CUDA_CHECK(cudaEventCreate(&start_));
    RETORT_CUDA_CHECK(cudaEventCreate(&stop_));
  }
#endif
}

StepTimer::~StepTimer() {
#ifdef RETORT_WITH_CUDA
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
#endif
}

double StepTimer::ms(const std::function<void()>& step) {
  if (device_.is_cpu()) {
    const Stopwatch watch;
    step();
    return watch.ms();
  }
#ifdef RETORT_WITH_CUDA
  cuda::DeviceGuard guard(device_);
  cudaStream_t stream = cuda::compute_stream(device_.index);
  RETORT_CUDA_CHECK(cudaEventRecord(start_, stream));
  step();
  RETORT_CUDA_CHECK(cudaEventRecord(stop_, stream));
  RETORT_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  RETORT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
#else
  return 0;  // unreachable: a build without CUDA has no GPU tensors to time
#endif
}

}  // namespace retort::bench
