#pragma once
// The keys of `retort distill compare`: every `retort distill run` key (the teacher, the student, its data and its
// budget, shared by every method) plus distill.compare.methods, the rows to run.
#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"

namespace retort::distill {

inline constexpr const char* kDistillCompareRunDir = "runs/distill-compare";

ConfigSchema compare_schema();

// The comparison's config without its own keys, resolved with distill_schema(): what every method's config is
// derived from (a student run records it in its config.yaml, which `retort eval` and `distill train` read back).
ResolvedConfig comparison_base_config(const ResolvedConfig& config);

}  // namespace retort::distill
