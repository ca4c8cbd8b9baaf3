#include "optim/optimizer_factory.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "core/util/error.h"
#include "optim/rekls/rekls_routing.h"

namespace retort::optim {

namespace {

using Builder = std::function<std::unique_ptr<Optimizer>(const OptimizerSpec&, const nn::NamedTensors&,
                                                         std::shared_ptr<Communicator>)>;

std::unique_ptr<Optimizer> build_adamw(const OptimizerSpec& spec, const nn::NamedTensors& params,
                                       std::shared_ptr<Communicator>) {
  return std::make_unique<AdamW>(decay_groups(params, spec.weight_decay), spec.adamw);
}

std::unique_ptr<Optimizer> build_rekls(const OptimizerSpec& spec, const nn::NamedTensors& params,
                                       std::shared_ptr<Communicator> tp_group) {
  ReklsOptions rekls;
  rekls.beta1 = spec.adamw.beta1;
  rekls.beta2 = spec.adamw.beta2;
  rekls.eps = spec.adamw.eps;
  rekls.shampoo_beta = spec.shampoo_beta;
  rekls.weight_decay = spec.weight_decay;
  ReklsRouting routing;
  routing.adamw_name_patterns = spec.rekls_adamw_name_patterns;
  return make_rekls_optimizer(params, rekls, spec.adamw, spec.weight_decay, routing, std::move(tp_group));
}

const std::map<std::string, Builder>& builders() {
  static const std::map<std::string, Builder> table{{"adamw", build_adamw}, {"rekls", build_rekls}};
  return table;
}

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : builders()) names.push_back(name);
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const nn::NamedTensors& params,
                                          std::shared_ptr<Communicator> tp_group) {
  const auto found = builders().find(spec.name);
  if (found == builders().end()) {
    std::string known;
    for (const auto& name : optimizer_names()) known += (known.empty() ? "" : ", ") + name;
    throw InputError(fmt::format("unknown optimizer '{}': choose one of {}", spec.name, known));
  }
  return found->second(spec, params, std::move(tp_group));
}

}  // namespace retort::optim
