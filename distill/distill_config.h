#pragma once
// The keys of the distillation commands: every `retort train` key (they describe the student and its data) plus
// distill.* (the teacher, the cache and the loss) and teacher.* (the teacher that `retort distill run` trains
// when distill.teacher holds no checkpoint yet). `retort distill train --help-config` lists them.
#include <filesystem>

#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"
#include "losses/topk_distillation.h"

namespace retort::distill {

ConfigSchema distill_schema();

// distill.mode
enum class DistillMode { kCache, kOnline };
DistillMode distill_mode_from(const ResolvedConfig& config);

// The top-k loss of the distill.* keys (tp group and normaliser left for the trainer).
losses::TopkDistillationOptions topk_loss_options_from(const ResolvedConfig& config);

std::filesystem::path teacher_run_dir(const ResolvedConfig& config);  // distill.teacher
std::filesystem::path cache_dir(const ResolvedConfig& config);        // distill.cache_dir

}  // namespace retort::distill
