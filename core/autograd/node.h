#pragma once
// A node of the dynamic tape: the inputs an op read and a closure that maps the gradient of its output to
// the gradients of those inputs (undefined for inputs that need none). A fused op is one node.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string name;
  std::vector<Tensor> inputs;
  BackwardFn backward;
};

}  // namespace retort
