#pragma once
// Several optimizers over disjoint parameters acting as one (REKLS for the matrices, AdamW for the rest): one
// step() steps them all, and their states share one file. Each part's tensors keep their own parameter-based
// names (disjoint, since the parameters are); its metadata is stored under "part<i>." plus the parts' names.
#include <memory>

#include "optim/optimizer.h"

namespace retort::optim {

class CompositeOptimizer : public Optimizer {
 public:
  explicit CompositeOptimizer(std::vector<std::unique_ptr<Optimizer>> parts);
  void update(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override;  // "rekls+adamw"
  const std::vector<std::unique_ptr<Optimizer>>& parts() const { return parts_; }

 private:
  static std::vector<ParamGroup> all_groups(const std::vector<std::unique_ptr<Optimizer>>& parts);
  std::vector<std::unique_ptr<Optimizer>> parts_;
};

}  // namespace retort::optim
