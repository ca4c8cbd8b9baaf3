#pragma once
// The keys `retort train` accepts (configs/toy-gpt.yaml sets them; `retort train --help-config` lists them).
#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"
#include "optim/lr_schedule.h"
#include "parallel/gpt_model.h"

namespace retort::apps {

ConfigSchema training_schema();

GptConfig gpt_config_from(const ResolvedConfig& config, int64_t vocab_size);
optim::LrSchedule lr_schedule_from(const ResolvedConfig& config);

}  // namespace retort::apps
