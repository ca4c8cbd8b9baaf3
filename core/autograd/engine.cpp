#include "core/autograd/engine.h"

#include <unordered_map>
#include <unordered_set>

#include "core/kernels/kernels.h"
#include "core/profile/op_profiler.h"
#include "core/util/error.h"

namespace retort {

namespace {
thread_local bool tls_grad_enabled = true;
}

bool grad_enabled() {
  return tls_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  tls_grad_enabled = enabled;
}

namespace autograd {

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor output, std::string_view name, std::vector<Tensor> inputs, BackwardFn backward) {
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = std::string(name);
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  output.set_requires_grad(true);
  output.set_grad_fn(std::move(node));
  return output;
}

Tensor record_folding(Tensor output, std::string_view name, std::vector<Tensor> inputs, int fold_input,
                      FoldingBackwardFn backward) {
  RETORT_CHECK(fold_input >= 0 && fold_input < static_cast<int>(inputs.size()),
               "record_folding('{}'): input {} to fold into does not exist ({} inputs)", name, fold_input,
               inputs.size());
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = std::string(name);
  node->inputs = std::move(inputs);
  node->folding_backward = std::move(backward);
  node->fold_input = fold_input;
  output.set_requires_grad(true);
  output.set_grad_fn(std::move(node));
  return output;
}

namespace {

// Reverse topological order of the tensors reachable from root through grad_fn edges (iterative DFS:
// deep models must not overflow the call stack).
std::vector<Tensor> topological_order(const Tensor& root) {
  std::vector<Tensor> order;
  std::unordered_set<TensorImpl*> visited;
  struct Frame {
    Tensor tensor;
    size_t next_input;
  };
  std::vector<Frame> stack{{root, 0}};
  visited.insert(root.impl());
  while (!stack.empty()) {
    Frame& frame = stack.back();
    const auto& node = frame.tensor.grad_fn();
    if (node && frame.next_input < node->inputs.size()) {
      const Tensor& input = node->inputs[frame.next_input++];
      if (input.requires_grad() && visited.insert(input.impl()).second) stack.push_back({input, 0});
      continue;
    }
    order.push_back(frame.tensor);
    stack.pop_back();
  }
  return {order.rbegin(), order.rend()};
}

Tensor add_tensors(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  kernels::add(a, b, out, 1.0f, 1.0f);
  return out;
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_output) {
  RETORT_CHECK(root.requires_grad(), "backward() on a tensor that does not require a gradient ({})", root.describe());
  RETORT_CHECK(grad_output.shape() == root.shape(), "gradient {} does not match output {}", grad_output.describe(),
               root.describe());
  NoGradGuard no_grad;  // backward closures compute plain tensors; no higher-order tape
  profile::PhaseScope phase("backward");
  std::unordered_map<TensorImpl*, Tensor> pending;  // gradients of non-leaf tensors not yet propagated
  pending[root.impl()] = grad_output;

  for (const Tensor& t : topological_order(root)) {
    auto it = pending.find(t.impl());
    if (it == pending.end()) continue;  // no gradient flowed here
    Tensor grad = std::move(it->second);
    pending.erase(it);
    const auto& node = t.grad_fn();
    if (!node) {
      // A leaf: accumulate. The first gradient is copied, since a backward closure may hand the same
      // tensor to several inputs; later ones are added in place. A stale buffer (mark_grad_stale) is written over.
      Tensor& current = t.impl()->autograd.grad;
      if (!current.defined()) {
        current = grad.dtype() == t.dtype() ? grad.clone() : grad.to(t.dtype());
      } else if (t.impl()->autograd.grad_stale) {
        current.copy_(grad.dtype() == current.dtype() ? grad : grad.to(current.dtype()));
        t.impl()->autograd.grad_stale = false;
      } else {
        Tensor g = grad.dtype() == current.dtype() ? grad : grad.to(current.dtype());
        kernels::add(current, g, current, 1.0f, 1.0f);
      }
      continue;
    }
    std::vector<Tensor> input_grads;
    {
      profile::Range range(node->name.c_str(), grad.device(), /*is_node=*/true);
      if (node->fold_input >= 0) {
        // Hand over what the folded input has gathered so far; the node returns it added to its own part.
        const Tensor& target = node->inputs[static_cast<size_t>(node->fold_input)];
        Tensor gathered;
        auto slot = target.requires_grad() ? pending.find(target.impl()) : pending.end();
        if (slot != pending.end() && slot->second.shape() == target.shape() && slot->second.dtype() == target.dtype()) {
          gathered = std::move(slot->second);
          pending.erase(slot);
        }
        input_grads = node->folding_backward(grad, gathered);
      } else {
        input_grads = node->backward(grad);
      }
    }
    RETORT_CHECK(input_grads.size() == node->inputs.size(), "backward of '{}' returned {} gradients for {} inputs",
                 node->name, input_grads.size(), node->inputs.size());
    for (size_t i = 0; i < input_grads.size(); ++i) {
      const Tensor& input = node->inputs[i];
      Tensor& g = input_grads[i];
      if (!input.requires_grad() || !g.defined()) continue;
      RETORT_CHECK(g.shape() == input.shape(), "backward of '{}' gave gradient {} for input {}", node->name,
                   g.describe(), input.describe());
      auto [slot, inserted] = pending.try_emplace(input.impl(), g);
      if (!inserted) slot->second = add_tensors(slot->second, g);
    }
  }
}

}  // namespace autograd
}  // namespace retort
