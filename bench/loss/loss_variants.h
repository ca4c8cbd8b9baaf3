#pragma once
// The variants the loss benchmark times: one step each, the loss and its gradient wrt this rank's student logits.
//   fused      (tp 1) retort's fused loss as an autograd op: forward, then its backward reads the logits again
//   one_read   (tp 1) the loss-and-gradient API (*_with_grad): on a Hopper GPU the row is read once, resident
//              in a cluster's shared memory
//   fused_tp   (tp > 1) the same fused ops, given the tp group: retort's vocab-parallel kernels
//   manual_tp  (tp > 1) the same communication composed by hand from core kernels (manual_tp_loss.h)
//   gather     (tp > 1) all-gather the full logits along the vocabulary, then the dense loss; the gradient is
//              this rank's columns of the dense gradient
#include <functional>
#include <string>
#include <vector>

#include "bench/loss/loss_inputs.h"
#include "bench/loss/loss_setup.h"
#include "core/tensor/tensor.h"

namespace retort::bench {

struct StepOut {
  Tensor loss;  // [] f32, detached
  Tensor grad;  // the local gradient wrt the student logits
};
using LossStep = std::function<StepOut()>;

// The variants that apply at this tp, in the order they run (the first is the gradients' reference).
std::vector<std::string> loss_variants_for(int tp);

// One step of `variant`; `one` is d loss / d loss, a [] f32 tensor of 1 on the run's device. The step refers to
// run and inputs, which must outlive it.
LossStep make_loss_step(const std::string& variant, const LossRun& run, const LossInputs& inputs, LossKind kind,
                        const Tensor& one);

}  // namespace retort::bench
