#pragma once
// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments; PyTorch's semantics:
//   p <- p - lr * wd * p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// Moments are f32 on the parameter's device.
#include "optim/optimizer.h"

namespace retort::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  void step(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override { return "adamw"; }
  int64_t steps() const { return step_; }

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;  // per group, per parameter
};

// One fused elementwise update of a parameter tensor (CPU or CUDA, f32 parameters and moments).
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
};
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace retort::optim
