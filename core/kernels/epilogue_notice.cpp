// The note the CUDA linear kernels leave when cuBLASLt offers no kernel for a fused epilogue: spdlog is kept out of
// nvcc's translation units, so gemm.cu calls this host function.
#ifdef RETORT_WITH_CUDA
#include "core/kernels/cuda/epilogue_notice.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <set>
#include <string>

namespace retort::kernels::cuda::detail {

void note_epilogue_fallback(const std::string& what) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard lock(mutex);
  // Once per shape: training asks for the same products every step.
  if (seen.insert(what).second)
    spdlog::warn("cuBLASLt has no kernel for {}; it runs as separate kernels (same result, one more pass)", what);
}

}  // namespace retort::kernels::cuda::detail
#endif
