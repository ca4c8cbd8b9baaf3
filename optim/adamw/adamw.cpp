#include "optim/adamw/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/nn/working_copy.h"
#include "core/profile/op_profiler.h"
#include "core/util/error.h"

namespace retort::optim {

#ifdef RETORT_WITH_CUDA
void adamw_update_many_cuda(const std::vector<AdamWTensor>& tensors, const AdamWStep& s, Device device,
                            const AdamWDeviceScalars* device_scalars);
#endif

namespace {

void adamw_update_cpu(const AdamWTensor& t, AdamWStep s, const AdamWDeviceScalars* from_memory) {
  float grad_factor = 1.0f;
  if (from_memory) {
    s.lr = from_memory->lr;
    s.bias_correction1 = from_memory->bias_correction1;
    s.bias_correction2 = from_memory->bias_correction2;
    grad_factor = from_memory->grad_factor;
  }
  float* p = t.param;
  const float* g = t.grad;
  float* m = t.exp_avg;
  float* v = t.exp_avg_sq;
  BFloat16* copy = t.bf16_copy;
  const int64_t n = t.numel;
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    // The factor is applied only when read from memory, so the plain update's arithmetic stays as it was.
    const float gi = from_memory ? g[i] * grad_factor : g[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    const float m_hat = m[i] / s.bias_correction1;
    const float v_hat = v[i] / s.bias_correction2;
    p[i] -= s.lr * (t.weight_decay * p[i] + m_hat / (std::sqrt(v_hat) + s.eps));
    if (copy) copy[i] = BFloat16(p[i]);
  }
}

}  // namespace

void adamw_update_many(const std::vector<AdamWTensor>& tensors, const AdamWStep& s, Device device,
                       const AdamWDeviceScalars* device_scalars) {
  if (tensors.empty()) return;
  if (device.is_cuda()) {
#ifdef RETORT_WITH_CUDA
    adamw_update_many_cuda(tensors, s, device, device_scalars);
    return;
#else
    throw Error("AdamW on a GPU tensor in a build without CUDA");
#endif
  }
  for (const AdamWTensor& t : tensors) adamw_update_cpu(t, s, device_scalars);
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWStep& s) {
  RETORT_CHECK(param.dtype() == DType::F32 && grad.dtype() == DType::F32 && param.numel() == grad.numel(),
               "AdamW needs f32 parameters and gradients of the same size ({} vs {})", param.describe(),
               grad.describe());
  RETORT_CHECK(grad.device() == param.device(), "AdamW: gradient {} is not on the parameter's device ({})",
               grad.describe(), param.describe());
  AdamWTensor t;
  t.param = param.data<float>();
  t.grad = grad.data<float>();
  t.exp_avg = exp_avg.data<float>();
  t.exp_avg_sq = exp_avg_sq.data<float>();
  t.numel = param.numel();
  t.weight_decay = s.weight_decay;
  adamw_update_many({t}, s, param.device());
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Optimizer(std::move(groups)), options_(options) {
  for (const auto& group : groups_) {
    exp_avg_.emplace_back();
    exp_avg_sq_.emplace_back();
    for (const auto& [name, p] : group.params) {
      exp_avg_.back().push_back(Tensor::zeros(p.shape(), DType::F32, p.device()));
      exp_avg_sq_.back().push_back(Tensor::zeros(p.shape(), DType::F32, p.device()));
    }
  }
}

AdamWStep AdamW::step_scalars(double lr) const {
  AdamWStep s{};
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(options_.beta1);
  s.beta2 = static_cast<float>(options_.beta2);
  s.eps = static_cast<float>(options_.eps);
  const auto [c1, c2] = next_bias_corrections();
  s.bias_correction1 = static_cast<float>(c1);
  s.bias_correction2 = static_cast<float>(c2);
  return s;
}

std::pair<double, double> AdamW::next_bias_corrections() const {
  const double t = static_cast<double>(step_ + 1);
  return {1.0 - std::pow(options_.beta1, t), 1.0 - std::pow(options_.beta2, t)};
}

std::vector<std::pair<Device, std::vector<AdamWTensor>>> AdamW::tables(std::vector<Tensor>* copies_written) {
  // One table per device (in practice one): a single launch updates every parameter of the model on a GPU.
  std::vector<std::pair<Device, std::vector<AdamWTensor>>> out;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      Tensor& p = groups_[gi].params[pi].second;
      const Tensor& grad = p.grad();
      if (!grad.defined() || p.grad_is_stale()) continue;
      RETORT_CHECK(p.dtype() == DType::F32 && grad.dtype() == DType::F32 && p.numel() == grad.numel() &&
                       grad.device() == p.device(),
                   "AdamW needs f32 parameters and gradients of the same size on one device ({}: {} vs {})",
                   groups_[gi].params[pi].first, p.describe(), grad.describe());
      AdamWTensor t;
      t.param = p.data<float>();
      t.grad = grad.data<float>();
      t.exp_avg = exp_avg_[gi][pi].data<float>();
      t.exp_avg_sq = exp_avg_sq_[gi][pi].data<float>();
      t.numel = p.numel();
      t.weight_decay = static_cast<float>(groups_[gi].weight_decay);
      if (const Tensor copy = nn::working_copy_buffer(p); copy.defined()) {
        t.bf16_copy = copy.data<BFloat16>();
        copies_written->push_back(p);
      }
      auto table = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == p.device(); });
      if (table == out.end()) table = out.insert(out.end(), {p.device(), {}});
      table->second.push_back(t);
    }
  }
  return out;
}

void AdamW::update(double lr) {
  NoGradGuard no_grad;
  const AdamWStep s = step_scalars(lr);
  ++step_;
  std::vector<Tensor> copies_written;
  for (const auto& [device, table] : tables(&copies_written)) {
    profile::Range range("adamw_multi_tensor", device);
    adamw_update_many(table, s, device);
  }
  for (const Tensor& p : copies_written) nn::mark_working_copy_fresh(p);
}

void AdamW::enqueue_update_from_device(const float* device_scalars) {
  NoGradGuard no_grad;
  const AdamWStep s = step_scalars(0.0);  // lr and the bias corrections come from device_scalars
  std::vector<Tensor> copies_written;
  for (const auto& [device, table] : tables(&copies_written)) {
    profile::Range range("adamw_multi_tensor", device);
    adamw_update_many(table, s, device, reinterpret_cast<const AdamWDeviceScalars*>(device_scalars));
  }
}

void AdamW::advance_step() {
  ++step_;
  for (auto& group : groups_)
    for (auto& [name, p] : group.params) {
      nn::mark_written(p);
      // The update rewrote the working copy of every parameter whose gradient it read (tables()'s choice).
      if (p.grad().defined() && !p.grad_is_stale() && nn::working_copy_buffer(p).defined())
        nn::mark_working_copy_fresh(p);
    }
}

OptimizerState AdamW::state() const {
  OptimizerState out;
  out.metadata["optimizer"] = "adamw";
  out.metadata["step"] = std::to_string(step_);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const std::string& name = groups_[gi].params[pi].first;
      out.tensors.emplace_back(name + ".exp_avg", exp_avg_[gi][pi]);
      out.tensors.emplace_back(name + ".exp_avg_sq", exp_avg_sq_[gi][pi]);
    }
  }
  return out;
}

void AdamW::load_state(const OptimizerState& state) {
  auto it = state.metadata.find("optimizer");
  RETORT_INPUT_CHECK(it != state.metadata.end() && it->second == "adamw",
                     "optimizer state was written by '{}', not adamw: resume with the optimizer it was trained with",
                     it == state.metadata.end() ? "unknown" : it->second);
  std::map<std::string, Tensor> by_name(state.tensors.begin(), state.tensors.end());
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const std::string& name = groups_[gi].params[pi].first;
      for (auto [suffix, target] : {std::pair{".exp_avg", &exp_avg_[gi][pi]}, {".exp_avg_sq", &exp_avg_sq_[gi][pi]}}) {
        auto t = by_name.find(name + suffix);
        RETORT_INPUT_CHECK(t != by_name.end(), "optimizer state has no '{}{}': the checkpoint is from another model",
                           name, suffix);
        RETORT_INPUT_CHECK(t->second.shape() == target->shape(), "optimizer state '{}{}' has shape {}, expected {}",
                           name, suffix, shape_str(t->second.shape()), shape_str(target->shape()));
        target->copy_(t->second.to(DType::F32).to(target->device()));
      }
    }
  }
  step_ = std::stoll(state.metadata.at("step"));
}

}  // namespace retort::optim
