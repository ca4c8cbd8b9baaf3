#pragma once
// Which parameters REKLS preconditions and which go to AdamW, and the optimizer that does both. REKLS needs a
// matrix whose two sides are feature spaces: vectors (biases, norm weights) have no Kronecker structure, and
// embedding tables and the LM head have a vocabulary side too large to decompose every step, so by default
// those go to AdamW (optimizer.md). The name patterns are substrings of parameter names, configurable.
#include <memory>
#include <string>
#include <vector>

#include "optim/adamw/adamw.h"
#include "optim/rekls/rekls_math.h"
#include "parallel/comm/communicator.h"

namespace retort::optim {

struct ReklsRouting {
  // A parameter whose name contains any of these goes to AdamW (as does every tensor that is not 2-D).
  std::vector<std::string> adamw_name_patterns = {"wte", "wpe", "lm_head", "embed"};
};

// "wte,wpe" -> {"wte", "wpe"} (empty pieces dropped, spaces trimmed).
std::vector<std::string> split_name_patterns(const std::string& comma_separated);

bool routes_to_adamw(const std::string& name, const Tensor& param, const ReklsRouting& routing);

// REKLS (or TP-REKLS when tp_group has more than one rank) on the routed matrices with decoupled weight decay
// `weight_decay`, AdamW on the rest with the usual decay split (optimizer.h's decay_groups). Returns the plain
// REKLS / TP-REKLS / AdamW optimizer when one side is empty.
std::unique_ptr<Optimizer> make_rekls_optimizer(const nn::NamedTensors& params, const ReklsOptions& rekls,
                                                const AdamWOptions& adamw, double weight_decay,
                                                const ReklsRouting& routing, std::shared_ptr<Communicator> tp_group);

}  // namespace retort::optim
