#pragma once
// A node of the dynamic tape: the inputs an op read and a closure that maps the gradient of its output to
// the gradients of those inputs (undefined for inputs that need none). A fused op is one node.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// A backward that also takes the gradient already gathered for one of its inputs (undefined when none has
// arrived yet) and returns that input's gradient with it added: a kernel can then fold the sum into the
// pass that writes the gradient (a residual stream's gradient into its norm's backward) instead of the
// tape adding the two afterwards.
using FoldingBackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const Tensor& gathered)>;

struct Node {
  std::string name;
  std::vector<Tensor> inputs;
  BackwardFn backward;
  // Set instead of `backward` by record_folding(): `fold_input` indexes the input whose gathered gradient
  // `folding_backward` receives.
  FoldingBackwardFn folding_backward;
  int fold_input = -1;
};

}  // namespace retort
