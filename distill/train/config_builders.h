#pragma once
// The keys `retort train` accepts (configs/toy-gpt.yaml sets them; `retort train --help-config` lists them).
#include <chrono>
#include <memory>
#include <string>

#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

// run.dir defaults to `default_run_dir`: each command has its own, so one command's run is never another's.
ConfigSchema training_schema(const std::string& default_run_dir = "runs/toy-gpt");

// The data.* keys (and run.seed, which drives the document split).
data::DatasetOptions dataset_options_from(const ResolvedConfig& config);

// parallel.timeout_s: how long a rank waits for a peer.
std::chrono::milliseconds comm_timeout_from(const ResolvedConfig& config);

GptConfig gpt_config_from(const ResolvedConfig& config, int64_t vocab_size);
optim::LrSchedule lr_schedule_from(const ResolvedConfig& config);
// The optim.* optimizer over `params`: AdamW, or REKLS on the matrices (TP-REKLS over tp_group when it has more
// than one rank) with AdamW on the rest.
std::unique_ptr<optim::Optimizer> optimizer_from(const ResolvedConfig& config, const nn::NamedTensors& params,
                                                 std::shared_ptr<Communicator> tp_group);

}  // namespace retort::distill
