#include "optim/rekls/rekls_routing.h"

#include "optim/composite_optimizer.h"
#include "optim/rekls/rekls.h"
#include "optim/rekls/tp_rekls.h"

namespace retort::optim {

std::vector<std::string> split_name_patterns(const std::string& comma_separated) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= comma_separated.size()) {
    size_t end = comma_separated.find(',', start);
    if (end == std::string::npos) end = comma_separated.size();
    std::string piece = comma_separated.substr(start, end - start);
    const size_t first = piece.find_first_not_of(" \t"), last = piece.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(piece.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

bool routes_to_adamw(const std::string& name, const Tensor& param, const ReklsRouting& routing) {
  if (param.ndim() != 2) return true;
  for (const std::string& pattern : routing.adamw_name_patterns)
    if (!pattern.empty() && name.find(pattern) != std::string::npos) return true;
  return false;
}

std::unique_ptr<Optimizer> make_rekls_optimizer(const nn::NamedTensors& params, const ReklsOptions& rekls,
                                                const AdamWOptions& adamw, double weight_decay,
                                                const ReklsRouting& routing, std::shared_ptr<Communicator> tp_group) {
  nn::NamedTensors matrices, others;
  for (const auto& [name, p] : params) (routes_to_adamw(name, p, routing) ? others : matrices).emplace_back(name, p);
  std::vector<std::unique_ptr<Optimizer>> parts;
  if (!matrices.empty()) {
    std::vector<ParamGroup> groups{{"rekls", matrices, weight_decay}};
    ReklsOptions options = rekls;
    options.weight_decay = weight_decay;
    if (tp_group && tp_group->size() > 1)
      parts.push_back(std::make_unique<TpRekls>(std::move(groups), options, tp_group));
    else
      parts.push_back(std::make_unique<Rekls>(std::move(groups), options));
  }
  if (!others.empty()) parts.push_back(std::make_unique<AdamW>(decay_groups(others, weight_decay), adamw));
  if (parts.size() == 1) return std::move(parts[0]);
  return std::make_unique<CompositeOptimizer>(std::move(parts));
}

}  // namespace retort::optim
