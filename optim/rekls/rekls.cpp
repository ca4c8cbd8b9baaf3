#include "optim/rekls/rekls.h"

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "optim/rekls/eigh.h"

namespace retort::optim {

Rekls::Rekls(std::vector<ParamGroup> groups, ReklsOptions options) : Optimizer(std::move(groups)), options_(options) {
  for (const auto& group : groups_) {
    states_.emplace_back();
    for (const auto& [name, p] : group.params) {
      RETORT_INPUT_CHECK(p.ndim() == 2 && p.dtype() == DType::F32,
                         "REKLS preconditions f32 matrices only, but parameter '{}' is {}: route it to AdamW "
                         "(make_rekls_optimizer does so for every tensor that is not 2-D)",
                         name, p.describe());
      const int64_t m = p.size(0), n = p.size(1);
      states_.back().push_back(make_rekls_state(m, n, m, 0, n, 0, p.device()));
    }
  }
}

void Rekls::update(double lr) {
  NoGradGuard no_grad;
  ++step_;
  eigh_calls_last_step_ = 0;
  const double bhat = shampoo_blend(options_.shampoo_beta, step_);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      Tensor& p = groups_[gi].params[pi].second;
      if (!p.grad().defined()) continue;
      ReklsParamState& s = states_[gi][pi];
      const ReklsBases old{s.left_basis, s.right_basis};
      update_factor_chunks(p.grad(), old, s, bhat, options_.eps);
      EighResult left = eigh(s.left_factor), right = eigh(s.right_factor);
      eigh_calls_last_step_ += 2;
      const ReklsBases fresh{left.eigenvectors, right.eigenvectors};
      rotate_into_new_basis(s, old, fresh, left.eigenvalues, right.eigenvalues);
      const Tensor direction = rotated_adam_direction(p.grad(), fresh, s, options_, step_);
      apply_rekls_update(p, direction, s.left_basis, s.right_basis, lr, groups_[gi].weight_decay);
    }
  }
}

void export_rekls_state(const std::string& prefix, const ReklsParamState& s, nn::NamedTensors& out) {
  out.emplace_back(prefix + "exp_avg", s.exp_avg);
  out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq);
  out.emplace_back(prefix + "left_factor", s.left_factor);
  out.emplace_back(prefix + "right_factor", s.right_factor);
  out.emplace_back(prefix + "left_basis", s.left_basis);
  out.emplace_back(prefix + "right_basis", s.right_basis);
  out.emplace_back(prefix + "left_eigenvalues", s.left_eigenvalues);
  out.emplace_back(prefix + "right_eigenvalues", s.right_eigenvalues);
}

void import_rekls_state(const std::string& prefix, const std::map<std::string, Tensor>& tensors, ReklsParamState& s) {
  const std::pair<const char*, Tensor*> parts[] = {{"exp_avg", &s.exp_avg},
                                                   {"exp_avg_sq", &s.exp_avg_sq},
                                                   {"left_factor", &s.left_factor},
                                                   {"right_factor", &s.right_factor},
                                                   {"left_basis", &s.left_basis},
                                                   {"right_basis", &s.right_basis},
                                                   {"left_eigenvalues", &s.left_eigenvalues},
                                                   {"right_eigenvalues", &s.right_eigenvalues}};
  for (const auto& [suffix, target] : parts) {
    auto it = tensors.find(prefix + suffix);
    RETORT_INPUT_CHECK(it != tensors.end(), "optimizer state has no '{}{}': the checkpoint is from another model",
                       prefix, suffix);
    RETORT_INPUT_CHECK(it->second.shape() == target->shape(),
                       "optimizer state '{}{}' has shape {}, expected {}: the checkpoint is from another model or "
                       "another parallel.tp",
                       prefix, suffix, shape_str(it->second.shape()), shape_str(target->shape()));
    // A fresh tensor, not copy_ into the old one: the bases may share storage with the last eigh result.
    *target = it->second.to(DType::F32).to(target->device()).clone();
  }
}

int64_t check_optimizer_metadata(const OptimizerState& state, const std::string& expected) {
  auto it = state.metadata.find("optimizer");
  RETORT_INPUT_CHECK(it != state.metadata.end() && it->second == expected,
                     "optimizer state was written by '{}', not {}: resume with the optimizer it was trained with",
                     it == state.metadata.end() ? "unknown" : it->second, expected);
  auto step = state.metadata.find("step");
  RETORT_INPUT_CHECK(step != state.metadata.end(), "optimizer state of {} has no 'step' entry: the file is damaged",
                     expected);
  return std::stoll(step->second);
}

OptimizerState Rekls::state() const {
  OptimizerState out;
  out.metadata["optimizer"] = name();
  out.metadata["step"] = std::to_string(step_);
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi)
      export_rekls_state(groups_[gi].params[pi].first + ".", states_[gi][pi], out.tensors);
  return out;
}

void Rekls::load_state(const OptimizerState& state) {
  const int64_t step = check_optimizer_metadata(state, name());
  std::map<std::string, Tensor> by_name(state.tensors.begin(), state.tensors.end());
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi)
      import_rekls_state(groups_[gi].params[pi].first + ".", by_name, states_[gi][pi]);
  step_ = step;
}

}  // namespace retort::optim
