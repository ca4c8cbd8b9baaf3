#pragma once
// What the stages of `retort distill run` and `retort distill compare` share about the training runs they keep in
// their folders: a stage's config (the experiment's config with some keys replaced), how far a run got, how it
// starts again, and its metric curves.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/config/resolved_config.h"
#include "distill/train/run_folder.h"

namespace retort::distill {

// The config with some keys replaced (the teacher's shape, a student's run directory), resolved with
// distill_schema(). An override the schema does not know is an InputError naming it.
ResolvedConfig derived_config(const ResolvedConfig& config, const std::vector<std::string>& overrides);

// The step a run's latest checkpoint reached (0 without one).
int64_t finished_steps(const std::filesystem::path& run_dir);

// How a stage's training run starts in its folder: continued from its checkpoint, anew over an attempt that
// stopped before its first checkpoint, or anew in an empty folder.
RunStart stage_start(const std::filesystem::path& run_dir);

// (step, key) of every metrics.jsonl line of the run that has the key.
std::vector<std::pair<double, double>> metric_curve(const std::filesystem::path& run_dir, const std::string& key);

}  // namespace retort::distill
