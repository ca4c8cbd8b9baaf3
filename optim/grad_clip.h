#pragma once
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::optim {

// The L2 norm of all gradients together (parameters without a gradient count as zero). Tensor-parallel aware:
// parameters sharded over a tp group (their ShardingSpec) are summed over the group, replicated ones count
// once, so every rank gets the norm of the whole model. Collective over that group when there is one.
double global_grad_norm(const std::vector<Tensor>& params);

// Scales every gradient by max_norm / (norm + 1e-6) (PyTorch's factor) when the global norm exceeds max_norm; returns
// the norm before clipping (logged by the trainer). max_norm <= 0 disables clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace retort::optim
