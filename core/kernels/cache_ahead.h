#pragma once
// What a decode step's attention may read ahead for the attention after it (kernels.h, attention_with_cache).
#include "core/tensor/tensor.h"

namespace retort::kernels {

// The next layer's key and value cache, shaped like the ones an attention_with_cache call appends to, or undefined
// tensors. Where defined, the GPU kernel reads the positions the next layer's attention will read toward L2 once it
// is done with its own, so that the next attention, a few products later, finds them there rather than in device
// memory. A hint only: nothing waits for it, the CPU ignores it, and the results are the same without it.
struct CacheAhead {
  Tensor keys, values;
};

}  // namespace retort::kernels
