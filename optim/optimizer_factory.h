#pragma once
// Optimizers by name: the one place that knows which optimizers exist. A training run names one (optim.name) and
// gets it built over its parameters; a new optimizer is one more entry in optimizer_factory.cpp.
#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "optim/adamw/adamw.h"
#include "optim/optimizer.h"
#include "optim/rekls/rekls_math.h"
#include "parallel/comm/communicator.h"

namespace retort::optim {

struct OptimizerSpec {
  std::string name = "adamw";  // one of optimizer_names()
  AdamWOptions adamw;          // AdamW, and the AdamW side of REKLS
  double weight_decay = 0.1;   // decoupled, of matrices (decay_groups)
  double shampoo_beta = 0.95;  // REKLS Kronecker-factor decay
  // REKLS: parameters whose names contain one of these go to AdamW (as do vectors); see rekls_routing.h.
  std::vector<std::string> rekls_adamw_name_patterns = {"wte", "wpe", "lm_head", "embed"};
};

// "adamw", "rekls".
std::vector<std::string> optimizer_names();

// The optimizer spec.name names over `params`: AdamW, or REKLS on the matrices (TP-REKLS over tp_group when it
// has more than one rank) with AdamW on the rest. An unknown name is an InputError listing the known ones.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const nn::NamedTensors& params,
                                          std::shared_ptr<Communicator> tp_group);

}  // namespace retort::optim
