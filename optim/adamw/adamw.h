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
  void update(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override { return "adamw"; }
  int64_t steps() const { return step_; }

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;  // per group, per parameter
};

// One tensor of a multi-tensor update: f32 parameter, gradient and moments of `numel` elements, and optionally the
// parameter's bf16 working copy (core/nn/working_copy.h), rewritten from the updated parameter in the same pass.
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  BFloat16* bf16_copy = nullptr;  // null: no working copy
  int64_t numel = 0;
  float weight_decay = 0.0f;
};

// The step's scalars; weight_decay is used only by the single-tensor adamw_update (the table carries its own).
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
};

// Every tensor of `tensors` (all on `device`) updated by one kernel launch on a GPU (one pass over a table of
// pointers), by one loop per tensor on the CPU. The same arithmetic, in the same order, on both.
void adamw_update_many(const std::vector<AdamWTensor>& tensors, const AdamWStep& s, Device device);

// One tensor: checks its dtypes and sizes, then adamw_update_many of one entry (no working copy).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace retort::optim
