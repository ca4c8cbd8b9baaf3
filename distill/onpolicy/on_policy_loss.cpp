#include "distill/onpolicy/on_policy_loss.h"

#include "core/ops/ops.h"
#include "losses/distribution_loss.h"

namespace retort::distill {

Tensor on_policy_loss(const Tensor& student, const Tensor& teacher, const Tensor& targets,
                      const OnPolicyOptions& options, std::shared_ptr<Communicator> tp_group) {
  losses::DistributionLossOptions loss;
  loss.temperature = options.kd_temperature;
  loss.ignore_index = options.ignore_index;
  loss.group = std::move(tp_group);
  auto divergence = [&](losses::Divergence which) {
    loss.divergence = which;
    return losses::distribution_loss(student, teacher, targets, loss);
  };
  switch (options.divergence) {
    case OnPolicyDivergence::Forward:
      return divergence(losses::Divergence::ForwardKL);
    case OnPolicyDivergence::Mixed:
      return ops::add(ops::scale(divergence(losses::Divergence::ForwardKL), options.mix),
                      ops::scale(divergence(losses::Divergence::ReverseKL), 1 - options.mix));
    case OnPolicyDivergence::Reverse:
      break;
  }
  return divergence(losses::Divergence::ReverseKL);
}

}  // namespace retort::distill
