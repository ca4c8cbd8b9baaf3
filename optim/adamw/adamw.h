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

// The scalars of a step read from device memory at run time (AdamW::enqueue_update_from_device), in this order.
struct AdamWDeviceScalars {
  float lr, bias_correction1, bias_correction2, grad_factor;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  void update(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override { return "adamw"; }
  int64_t steps() const { return step_; }

  // The update of a step that a CUDA graph replays (distill/train/graphed_train_step.h), which cannot carry the
  // step's learning rate and bias corrections as launch arguments: they are read at run time from
  // `device_scalars` (f32 AdamWDeviceScalars on the parameters' device) and each gradient is multiplied by
  // `grad_factor` (the clip factor) as it is read. Enqueues only: it changes no host state. Call advance_step()
  // once per update that actually ran.
  void enqueue_update_from_device(const float* device_scalars);
  // The bias corrections of the next step (1 - beta^t, t = steps() + 1), for the caller that stages the scalars.
  std::pair<double, double> next_bias_corrections() const;
  // Counts one update of enqueue_update_from_device (the step a checkpoint saves) and stamps the working copies
  // it wrote as fresh.
  void advance_step();

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;  // per group, per parameter

  // One table per device of every parameter with a gradient (not a stale one: Tensor::mark_grad_stale);
  // `copies_written` gets the parameters whose working copy the update rewrites.
  std::vector<std::pair<Device, std::vector<AdamWTensor>>> tables(std::vector<Tensor>* copies_written);
  // The step's scalars for learning rate `lr` at step steps() + 1.
  AdamWStep step_scalars(double lr) const;
};

// Every tensor of `tensors` (all on `device`) updated by one kernel launch on a GPU (one pass over a table of
// pointers), by one loop per tensor on the CPU. The same arithmetic, in the same order, on both. With
// `device_scalars` (an AdamWDeviceScalars in `device`'s memory), lr and the bias corrections come from there
// instead of `s`, and each gradient is multiplied by grad_factor when read.
void adamw_update_many(const std::vector<AdamWTensor>& tensors, const AdamWStep& s, Device device,
                       const AdamWDeviceScalars* device_scalars = nullptr);

// One tensor: checks its dtypes and sizes, then adamw_update_many of one entry (no working copy).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace retort::optim
