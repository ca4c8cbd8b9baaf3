#include "bench/harness/rank_device.h"

#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cuda_context.h"
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::bench {

std::string device_name(Device device) {
#ifdef RETORT_WITH_CUDA
  if (device.is_cuda()) return cuda::device_properties(device.index).name;
#endif
  return device.is_cuda() ? device.str() : "cpu";
}

void use_gpu(Device device, int rank) {
#ifdef RETORT_WITH_CUDA
  RETORT_INPUT_CHECK(device.index < cuda_device_count(),
                     "rank {} needs {} and this machine has {} GPU(s): every rank needs one of its own", rank,
                     device.str(), cuda_device_count());
  RETORT_CUDA_CHECK(cudaSetDevice(device.index));  // this rank's context lives on its own GPU
#else
  throw InputError("--device cuda needs a CUDA build of retort; this one has no CUDA backend (use --device cpu)");
#endif
}

std::shared_ptr<Communicator> collective_group(const std::shared_ptr<GlooCommunicator>& world, Device device,
                                               bool check_metadata) {
#ifdef RETORT_WITH_CUDA
  if (device.is_cuda()) {
    NcclOptions options;
    options.check_metadata = check_metadata;
    return NcclCommunicator::create(world, device.index, options);
  }
#endif
  return world;
}

void leave_together(Device device, Communicator* group) {
  if (device.is_cuda()) device_runtime::synchronize(device);
  if (group != nullptr) group->barrier();
}

}  // namespace retort::bench
