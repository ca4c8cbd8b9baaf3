#pragma once
// Module: a tree of named parameters. Children register under a name, so every parameter has a dotted
// path ("blocks.0.attn.qkv.weight") used by state dicts, checkpoints and optimizer routing.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;

  // Parameters in registration order, each once (a tied weight appears under its first name).
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t parameter_count() const;

  NamedTensors state_dict() const { return named_parameters(); }
  // Copies values in by name. strict: every parameter must be present and nothing else; shapes must match.
  // Values are converted to the parameter's dtype and device.
  void load_state_dict(const NamedTensors& values, bool strict = true);

  // Moves every parameter to `device` in place: handles held elsewhere (optimizers, tied layers) follow.
  void to(Device device);
  void zero_grad();

 protected:
  Tensor register_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    children_.emplace_back(name, child);
    return child;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out, std::vector<const TensorImpl*>& seen) const;

  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace retort::nn
