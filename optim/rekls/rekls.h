#pragma once
// REKLS ("realtime eigen KL-Shampoo"): SOAP with an eigendecomposition of both Kronecker factors every step and
// the KL-Shampoo factor update (shared/reference/optimizer.md gives the exact steps). Whole 2-D parameters on
// one process; TP-REKLS (tp_rekls.h) is the tensor-parallel version. Vectors, embeddings and the LM head go to
// AdamW instead: make_rekls_optimizer (rekls_routing.h) does that split.
#include <memory>

#include "optim/optimizer.h"
#include "optim/rekls/rekls_math.h"

namespace retort::optim {

class Rekls : public Optimizer {
 public:
  // Every parameter must be 2-D. A group's weight_decay overrides options.weight_decay.
  Rekls(std::vector<ParamGroup> groups, ReklsOptions options);
  void update(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override { return "rekls"; }
  int64_t steps() const { return step_; }
  // Eigendecompositions this process ran in the last step (2 per updated parameter).
  int64_t eigh_calls_last_step() const { return eigh_calls_last_step_; }

 private:
  ReklsOptions options_;
  int64_t step_ = 0;
  int64_t eigh_calls_last_step_ = 0;
  std::vector<std::vector<ReklsParamState>> states_;  // per group, per parameter
};

// The state tensors of one parameter under `prefix` ("<param name>."), shared by REKLS and TP-REKLS.
void export_rekls_state(const std::string& prefix, const ReklsParamState& state, nn::NamedTensors& out);
void import_rekls_state(const std::string& prefix, const std::map<std::string, Tensor>& tensors,
                        ReklsParamState& state);
// Checks the "optimizer" metadata entry and returns the step.
int64_t check_optimizer_metadata(const OptimizerState& state, const std::string& expected);

}  // namespace retort::optim
