#pragma once
// The few device services the tensor core needs, with no CUDA types in the interface, so that a CPU-only
// build compiles the same callers. In a build without CUDA every GPU entry point throws a clear error.
#include <cstddef>

#include "core/tensor/device.h"

namespace retort::device_runtime {

void* allocate(size_t nbytes, Device device);
void release(void* ptr, size_t nbytes, Device device);  // nbytes: as allocated
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
// `height` rows of `width` bytes between two pitched layouts on one device (stream-ordered on a GPU): the
// whole re-layout that slicing or concatenating along a non-leading dim needs.
void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height,
             Device device);
void memset_zero(void* ptr, size_t nbytes, Device device);
void synchronize(Device device);
// Whether work on `device` is being recorded into a CUDA graph instead of run (false on the CPU): what is made then
// lives only as long as the graph's memory.
bool capturing(Device device);

}  // namespace retort::device_runtime
