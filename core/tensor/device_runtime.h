#pragma once
// The few device services the tensor core needs, with no CUDA types in the interface, so that a CPU-only
// build compiles the same callers. In a build without CUDA every GPU entry point throws a clear error.
#include <cstddef>

#include "core/tensor/device.h"

namespace retort::device_runtime {

void* allocate(size_t nbytes, Device device);
void release(void* ptr, Device device);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void memset_zero(void* ptr, size_t nbytes, Device device);
void synchronize(Device device);

}  // namespace retort::device_runtime
