#pragma once
// How a kernel entry point (kernels.cpp, decode_kernels.cpp) reaches its backend: RETORT_DISPATCH(device, fn, ...)
// calls kernels::cuda::fn or kernels::cpu::fn by the device, as one op of an open op profile
// (core/profile/op_profiler.h; a relaxed load when none is). Only for those files.
#include <initializer_list>

#include "core/profile/op_profiler.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

#ifdef RETORT_WITH_CUDA
#define RETORT_DISPATCH(device, fn, ...)            \
  do {                                              \
    ::retort::profile::Range range_(#fn, (device)); \
    if ((device).is_cuda()) {                       \
      ::retort::kernels::cuda::fn(__VA_ARGS__);     \
    } else {                                        \
      ::retort::kernels::cpu::fn(__VA_ARGS__);      \
    }                                               \
  } while (0)
#else
#define RETORT_DISPATCH(device, fn, ...)                                                              \
  do {                                                                                                \
    ::retort::profile::Range range_(#fn, (device));                                                   \
    RETORT_CHECK(!(device).is_cuda(), "{}: this build has no CUDA backend (rebuild with nvcc)", #fn); \
    ::retort::kernels::cpu::fn(__VA_ARGS__);                                                          \
  } while (0)
#endif

namespace retort::kernels::dispatch {

// Every defined tensor of `tensors` on the first one's device, or an error naming `op` and both tensors.
inline void same_device(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    RETORT_CHECK(t->device() == first->device(), "{}: tensors on different devices ({} and {})", op, first->describe(),
                 t->describe());
  }
}

}  // namespace retort::kernels::dispatch
