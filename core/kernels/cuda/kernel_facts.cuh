#pragma once
// What a launch needs to know about one kernel on each device, found once and kept: the small-m products
// (small_m_linear.cu, small_m_linear_mma.cu) and the one-launch decode step (gpt_decode_layers.cu) size their grids
// by it on every decode step. Include after common.cuh.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace retort::kernels::cuda::detail {

// What a launch needs to know about one kernel on each device, found once: whether its shared memory limit was raised
// past the 48 KiB default, and how many of its blocks an SM holds at each shared memory size (the grid).
struct KernelFacts {
  std::mutex mutex;
  std::map<std::pair<int, size_t>, int> resident;  // (device, shared bytes) -> blocks per SM
  std::set<int> raised;                            // devices
};

inline int blocks_per_sm(const void* kernel, int threads, size_t shared, KernelFacts& facts) {
  const int device = rc::current_device();
  const std::lock_guard<std::mutex> lock(facts.mutex);
  if (shared > 48 * 1024 && !facts.raised.count(device)) {
    const int most = static_cast<int>(rc::device_properties(device).sharedMemPerBlockOptin);
    RETORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    facts.raised.insert(device);
  }
  const auto key = std::make_pair(device, shared);
  if (auto it = facts.resident.find(key); it != facts.resident.end()) return it->second;
  int blocks = 0;
  RETORT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared));
  blocks = std::max(blocks, 1);
  facts.resident.emplace(key, blocks);
  return blocks;
}

}  // namespace retort::kernels::cuda::detail
