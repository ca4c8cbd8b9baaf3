#include "core/tensor/device_choice.h"

#include <fmt/format.h>

#include "core/util/error.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace retort {

std::string cuda_unavailable_reason() {
#ifdef RETORT_WITH_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // the failed query leaves a sticky error behind
    return fmt::format("the CUDA runtime finds no usable GPU ({}: {})", cudaGetErrorName(status),
                       cudaGetErrorString(status));
  }
  if (count == 0) return "the CUDA runtime sees no GPU on this machine";
  return {};
#else
  return "this retort build has no CUDA backend (it was configured without the CUDA toolkit)";
#endif
}

Device usable_device(std::string_view text, std::string_view option) {
  Device device;
  try {
    device = Device::parse(text);
  } catch (const InputError&) {
    throw InputError(fmt::format("{} {}: unknown device; use cpu, cuda or cuda:N", option, text));
  }
  if (device.is_cpu()) return device;
  const std::string reason = cuda_unavailable_reason();
  RETORT_INPUT_CHECK(reason.empty(),
                     "{} {}: {}. Use {} cpu, or check the GPU with nvidia-smi (and CUDA_VISIBLE_DEVICES, which can "
                     "hide every GPU)",
                     option, text, reason, option);
  RETORT_INPUT_CHECK(device.index < cuda_device_count(),
                     "{} {}: this machine has {} CUDA device(s), numbered from 0; use {} cuda:0 .. cuda:{}", option,
                     text, cuda_device_count(), option, cuda_device_count() - 1);
  return device;
}

}  // namespace retort
