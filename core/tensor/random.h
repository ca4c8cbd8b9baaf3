#pragma once
// Deterministic initialisation. Values are a pure function of (seed, stream, element index), drawn on
// the host and copied to the device, so the same seed gives bit-identical weights on CPU and GPU and
// does not depend on the order in which parameters are created.
#include <cstdint>

#include "core/tensor/tensor.h"

namespace retort {

// Element i of stream `stream`: N(0, std^2) by Box-Muller on two counter-based uniforms.
Tensor randn(const Shape& shape, double std, uint64_t seed, uint64_t stream, DType dtype = DType::F32,
             Device device = Device::cpu());
Tensor rand_uniform(const Shape& shape, double low, double high, uint64_t seed, uint64_t stream,
                    DType dtype = DType::F32, Device device = Device::cpu());

// A stable 64-bit stream id for a name (e.g. a parameter's dotted name): FNV-1a.
uint64_t stream_id(std::string_view name);

}  // namespace retort
