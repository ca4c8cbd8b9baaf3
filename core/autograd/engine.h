#pragma once
#include <string_view>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"

namespace retort::autograd {

// Records `output` as produced by an op over `inputs` when the tape is on and some input requires a
// gradient; returns `output` either way. The closure must not capture `output` itself (that would make
// a reference cycle); it may capture inputs and any saved tensors.
Tensor record(Tensor output, std::string_view name, std::vector<Tensor> inputs, BackwardFn backward);

// The same for an op whose backward folds the gradient gathered so far for inputs[fold_input] into its own
// result for that input (FoldingBackwardFn in node.h). The tape hands the gathered gradient over only when it
// has the input's shape and dtype; gradients that arrive later are added as usual, so the result is the same
// in any order.
Tensor record_folding(Tensor output, std::string_view name, std::vector<Tensor> inputs, int fold_input,
                      FoldingBackwardFn backward);

// True when an op over `inputs` will be recorded.
bool needs_grad(const std::vector<Tensor>& inputs);

// Walks the tape from `root` in reverse topological order. Leaf tensors that require a gradient
// accumulate into .grad() (so several backward calls add up: gradient accumulation); intermediate
// gradients are freed as soon as their node has run.
void run_backward(const Tensor& root, const Tensor& grad_output);

}  // namespace retort::autograd
