#include "optim/composite_optimizer.h"

#include "core/util/error.h"

namespace retort::optim {

std::vector<ParamGroup> CompositeOptimizer::all_groups(const std::vector<std::unique_ptr<Optimizer>>& parts) {
  std::vector<ParamGroup> groups;
  for (const auto& part : parts) {
    RETORT_CHECK(part != nullptr, "CompositeOptimizer: a part is null");
    groups.insert(groups.end(), part->groups().begin(), part->groups().end());
  }
  return groups;
}

// The base class keeps copies of every part's groups (tensor handles share storage), so zero_grad() and
// groups() see every parameter.
CompositeOptimizer::CompositeOptimizer(std::vector<std::unique_ptr<Optimizer>> parts)
    : Optimizer(all_groups(parts)), parts_(std::move(parts)) {}

void CompositeOptimizer::update(double lr) {
  for (auto& part : parts_) part->step(lr);
}

std::string CompositeOptimizer::name() const {
  std::string joined;
  for (const auto& part : parts_) {
    if (!joined.empty()) joined += '+';
    joined += part->name();
  }
  return joined;
}

OptimizerState CompositeOptimizer::state() const {
  OptimizerState out;
  out.metadata["optimizer"] = name();
  for (size_t i = 0; i < parts_.size(); ++i) {
    OptimizerState part = parts_[i]->state();
    for (const auto& [key, value] : part.metadata) out.metadata["part" + std::to_string(i) + "." + key] = value;
    out.tensors.insert(out.tensors.end(), part.tensors.begin(), part.tensors.end());
  }
  return out;
}

void CompositeOptimizer::load_state(const OptimizerState& state) {
  auto it = state.metadata.find("optimizer");
  RETORT_INPUT_CHECK(it != state.metadata.end() && it->second == name(),
                     "optimizer state was written by '{}', not {}: resume with the optimizer it was trained with",
                     it == state.metadata.end() ? "unknown" : it->second, name());
  for (size_t i = 0; i < parts_.size(); ++i) {
    const std::string prefix = "part" + std::to_string(i) + ".";
    OptimizerState part;
    part.tensors = state.tensors;  // handles only; each part picks its own names
    for (const auto& [key, value] : state.metadata)
      if (key.rfind(prefix, 0) == 0) part.metadata[key.substr(prefix.size())] = value;
    parts_[i]->load_state(part);
  }
}

}  // namespace retort::optim
