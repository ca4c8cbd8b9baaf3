#pragma once
// The per-backend implementations behind kernels.h: the same signatures in retort::kernels::cpu and, in a
// CUDA build, retort::kernels::cuda. kernels.cpp checks arguments once and dispatches here.
#include "core/tensor/tensor.h"

namespace retort::kernels::cpu {
#include "core/kernels/kernel_signatures.inc"
}  // namespace retort::kernels::cpu

#ifdef RETORT_WITH_CUDA
namespace retort::kernels::cuda {
#include "core/kernels/kernel_signatures.inc"
}  // namespace retort::kernels::cuda
#endif
