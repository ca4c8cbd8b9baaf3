#pragma once
// The device a user asked for (a --device flag or a run.device key), checked against this build and this machine
// before any work starts, so that a missing GPU, driver or CUDA backend is one readable error naming the option
// to change rather than a raw CUDA error code from deep inside the first kernel launch.
#include <string_view>

#include "core/tensor/device.h"

namespace retort {

// Parses `text` ("cpu", "cuda", "cuda:N") and checks that it can be used here; `option` names where the value
// came from ("--device", "run.device") in the error.
Device usable_device(std::string_view text, std::string_view option);

// Why no CUDA device can be used ("" when one can): no CUDA backend in this build, or the driver's own reason
// (no device, no driver, driver too old for the toolkit).
std::string cuda_unavailable_reason();

}  // namespace retort
