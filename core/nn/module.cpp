#include "core/nn/module.h"

#include <algorithm>
#include <set>

#include "core/util/error.h"

namespace retort::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  params_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out, std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params_) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, seen);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::load_state_dict(const NamedTensors& values, bool strict) {
  std::set<std::string> used;
  for (auto& [name, param] : named_parameters()) {
    auto it = std::find_if(values.begin(), values.end(), [&](const auto& kv) { return kv.first == name; });
    if (it == values.end()) {
      RETORT_INPUT_CHECK(!strict, "checkpoint has no tensor '{}': it was written for a different model", name);
      continue;
    }
    RETORT_INPUT_CHECK(it->second.shape() == param.shape(),
                       "checkpoint tensor '{}' has shape {} but the model expects {}: check the model config", name,
                       shape_str(it->second.shape()), shape_str(param.shape()));
    Tensor value = it->second.to(param.dtype()).to(param.device());
    param.copy_(value);
    used.insert(name);
  }
  if (strict) {
    for (auto& [name, value] : values)
      RETORT_INPUT_CHECK(used.count(name), "checkpoint tensor '{}' does not belong to this model", name);
  }
}

void Module::to(Device device) {
  for (auto& [name, t] : named_parameters()) {
    if (t.device() == device) continue;
    Tensor moved = t.to(device);
    t.impl()->storage = moved.impl()->storage;
    t.impl()->offset_bytes = moved.impl()->offset_bytes;
    t.zero_grad();
  }
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

}  // namespace retort::nn
