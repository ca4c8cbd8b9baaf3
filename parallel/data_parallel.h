#pragma once
// Data parallelism: after backward, every rank of a dp group holds the gradient of its own batch; the model's
// gradient is their mean. One all-reduce over a flat buffer of every gradient (one launch, one message per
// peer, instead of one per parameter).
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace retort {

// Collective over dp_group: replaces each parameter's gradient by the mean over the group. Parameters without
// a gradient get a zero one first, so every rank sends the same layout. A null or one-rank group is a no-op.
void average_gradients(const std::vector<Tensor>& params, const std::shared_ptr<Communicator>& dp_group);

}  // namespace retort
