#pragma once
// Optimizer interface over parameter groups. State (moments, step counts) is exported as named tensors
// plus string metadata, so a checkpoint can hold it in a safetensors file and resume bit-identically.
#include <map>
#include <string>
#include <vector>

#include "core/nn/module.h"

namespace retort::optim {

struct ParamGroup {
  std::string name;
  nn::NamedTensors params;
  double weight_decay = 0.0;
};

struct OptimizerState {
  nn::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr` from the gradients currently in .grad() (params without a
  // gradient are skipped). Every parameter's low-precision working copy (core/nn/working_copy.h) is stale after
  // it, so the next forward recasts it, unless the update wrote the copy itself (AdamW does, in the same pass).
  void step(double lr);
  virtual OptimizerState state() const = 0;
  virtual void load_state(const OptimizerState& state) = 0;
  virtual std::string name() const = 0;

  void zero_grad();
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
  // The update itself; step() marks the weights written before calling it.
  virtual void update(double lr) = 0;
  std::vector<ParamGroup> groups_;
};

// The usual split for transformers: matrices decay, vectors (biases, norm weights) do not.
std::vector<ParamGroup> decay_groups(const nn::NamedTensors& params, double weight_decay);

}  // namespace retort::optim
