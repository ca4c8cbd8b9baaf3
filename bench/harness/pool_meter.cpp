#include "bench/harness/pool_meter.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda/cuda_context.h"
#include "core/tensor/device_runtime.h"
#endif

namespace retort::bench {

#ifdef RETORT_WITH_CUDA
namespace {

cudaMemPool_t device_pool(Device device) {
  cudaMemPool_t pool = nullptr;
  RETORT_CUDA_CHECK(cudaDeviceGetMemPool(&pool, device.index));
  return pool;
}

}  // namespace
#endif

void PoolMeter::start() {
#ifdef RETORT_WITH_CUDA
  if (!available()) return;
  device_runtime::synchronize(device_);
  cudaMemPool_t pool = device_pool(device_);
  std::uint64_t used = 0, zero = 0;  // the attributes are cuuint64_t (64-bit)
  RETORT_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  RETORT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));  // resets to current
  RETORT_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(device_.index, cudaGraphMemAttrUsedMemHigh, &zero));
  base_ = used;
#endif
}

double PoolMeter::extra() {
#ifdef RETORT_WITH_CUDA
  if (!available()) return -1;
  device_runtime::synchronize(device_);
  std::uint64_t high = 0, now = 0, graph_high = 0;
  RETORT_CUDA_CHECK(cudaMemPoolGetAttribute(device_pool(device_), cudaMemPoolAttrUsedMemHigh, &high));
  RETORT_CUDA_CHECK(cudaMemPoolGetAttribute(device_pool(device_), cudaMemPoolAttrUsedMemCurrent, &now));
  RETORT_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(device_.index, cudaGraphMemAttrUsedMemHigh, &graph_high));
  const double pool_peak = static_cast<double>(high), with_graphs = static_cast<double>(now + graph_high);
  return std::max(pool_peak, with_graphs) - static_cast<double>(base_);
#else
  return -1;
#endif
}

}  // namespace retort::bench
