#include "bench/loss/loss_variants.h"

#include <fmt/format.h>

#include "bench/loss/manual_tp_loss.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"

namespace retort::bench {
namespace {

losses::Divergence divergence_of(LossKind kind) {
  return kind == LossKind::ForwardKL ? losses::Divergence::ForwardKL : losses::Divergence::ReverseKL;
}

// The gradient an op's autograd node gives its first input for d loss = `one`: what loss.backward() computes for
// logits that are not a leaf (a leaf would add the engine's copy into .grad, which a model's logits never pay).
Tensor first_input_grad(const Tensor& loss, const Tensor& one) {
  RETORT_CHECK(loss.grad_fn() != nullptr, "the loss recorded no autograd node");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = loss.grad_fn()->backward(one);
  RETORT_CHECK(!grads.empty() && grads[0].defined(), "the loss node gave no gradient for its logits");
  return grads[0];
}

// The loss op on (student, teacher | targets); group null: dense (or single-device) loss.
Tensor loss_op(LossKind kind, const Tensor& student, const Tensor& teacher, const Tensor& targets,
               const std::shared_ptr<Communicator>& group) {
  if (kind == LossKind::CrossEntropy) {
    losses::CrossEntropyOptions options;
    options.group = group;
    return losses::cross_entropy(student, targets, options);
  }
  losses::DistributionLossOptions options;
  options.divergence = divergence_of(kind);
  options.group = group;
  return losses::distribution_loss(student, teacher, Tensor(), options);
}

LossStep fused_step(const LossRun& run, const LossInputs& in, LossKind kind, const Tensor& one) {
  return [&run, &in, kind, one] {
    Tensor loss = loss_op(kind, in.student, in.teacher, in.targets, run.comm);
    Tensor grad = first_input_grad(loss, one);
    return StepOut{loss.detach(), grad};
  };
}

// Loss and gradient in one call into a gradient buffer allocated in the step (the *_with_grad API): on one
// Hopper GPU the one-read kernels, the row resident in a cluster's shared memory.
LossStep one_read_step(const LossRun& run, const LossInputs& in, LossKind kind) {
  return [&run, &in, kind] {
    Tensor grad = Tensor::empty(in.student.shape(), in.student.dtype(), run.device);
    if (kind == LossKind::CrossEntropy)
      return StepOut{losses::cross_entropy_with_grad(in.student, in.targets, grad), grad};
    losses::DistributionLossOptions options;
    options.divergence = divergence_of(kind);
    return StepOut{losses::distribution_loss_with_grad(in.student, in.teacher, Tensor(), grad, options), grad};
  };
}

LossStep gather_step(const LossRun& run, const LossInputs& in, LossKind kind, const Tensor& one) {
  return [&run, &in, kind, one] {
    Tensor full = run.comm->all_gather(in.student, 1);  // [tokens, vocab]
    full.set_requires_grad(true);
    const Tensor full_teacher = is_kl(kind) ? run.comm->all_gather(in.teacher, 1) : Tensor();
    Tensor loss = loss_op(kind, full, full_teacher, in.targets, nullptr);
    const Tensor full_grad = first_input_grad(loss, one);
    Tensor grad = Tensor::empty(in.student.shape(), in.student.dtype(), run.device);
    const size_t elem = dtype_size(grad.dtype());
    device_runtime::copy_2d(grad.raw_data(), in.vocab_local * elem,
                            static_cast<const char*>(full_grad.raw_data()) + run.rank * in.vocab_local * elem,
                            in.vocab * elem, in.vocab_local * elem, static_cast<size_t>(run.tokens), run.device);
    return StepOut{loss.detach(), grad};
  };
}

}  // namespace

std::vector<std::string> loss_variants_for(int tp) {
  if (tp == 1) return {"fused", "one_read"};
  return {"fused_tp", "manual_tp", "gather"};
}

LossStep make_loss_step(const std::string& variant, const LossRun& run, const LossInputs& inputs, LossKind kind,
                        const Tensor& one) {
  if (variant == "fused" || variant == "fused_tp") return fused_step(run, inputs, kind, one);
  if (variant == "one_read") return one_read_step(run, inputs, kind);
  if (variant == "gather") return gather_step(run, inputs, kind, one);
  if (variant == "manual_tp") return manual_tp_step(run, inputs, kind);
  throw InputError(fmt::format("unknown variant '{}'", variant));
}

}  // namespace retort::bench
