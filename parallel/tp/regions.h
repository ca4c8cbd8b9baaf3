#pragma once
// The four conjugate autograd pairs of Megatron-style tensor parallelism. Each is an identity or a collective
// in forward and its adjoint in backward, so gradients come out exact on every rank without any later fix-up:
//
//   copy_to_tp_region      forward: identity               backward: all-reduce (sum) over the group
//   reduce_from_tp_region  forward: all-reduce (sum)       backward: identity
//   gather_from_tp_region  forward: all-gather, last dim   backward: this rank's chunk of the last dim
//   scatter_to_tp_region   forward: this rank's chunk      backward: all-gather, last dim
//
// A column-parallel layer starts with copy_to (its input is replicated, each rank's partial input gradient
// must be summed); a row-parallel layer ends with reduce_from (each rank holds a partial sum of the output).
// A null group or a group of one rank makes all four the identity.
#include <memory>

#include "parallel/comm/communicator.h"

namespace retort::tp {

Tensor copy_to_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group);
Tensor reduce_from_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group);
Tensor gather_from_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group);
Tensor scatter_to_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group);

inline bool is_distributed(const std::shared_ptr<Communicator>& group) {
  return group != nullptr && group->size() > 1;
}

}  // namespace retort::tp
