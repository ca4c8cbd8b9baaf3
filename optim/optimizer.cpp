#include "optim/optimizer.h"

#include "core/nn/working_copy.h"
#include "core/profile/op_profiler.h"

namespace retort::optim {

void Optimizer::step(double lr) {
  profile::PhaseScope phase("optimizer");
  // Marked before the update, so an update that refreshes a copy in its own pass stamps it with the new version.
  for (auto& group : groups_)
    for (auto& [name, p] : group.params) nn::mark_written(p);
  update(lr);
}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& [name, p] : group.params) p.zero_grad();
}

std::vector<ParamGroup> decay_groups(const nn::NamedTensors& params, double weight_decay) {
  ParamGroup decay{"decay", {}, weight_decay}, no_decay{"no_decay", {}, 0.0};
  for (const auto& [name, p] : params) (p.ndim() >= 2 ? decay : no_decay).params.emplace_back(name, p);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

}  // namespace retort::optim
