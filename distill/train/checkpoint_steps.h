#pragma once
// The checkpoints a run folder holds, by step (<run>/checkpoints/step_NNNNNNNN/, checkpoint.h): `retort eval --step`
// scores one of them instead of the latest.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace retort::distill {

// The step folders (step_NNNNNNNN) under `root` (a run's checkpoints folder), ascending by step; temporary folders
// of an unfinished save and other names are not listed.
std::vector<std::filesystem::path> checkpoint_step_folders(const std::filesystem::path& root);

// The steps of the run's complete checkpoints, ascending (temporary folders of an unfinished save are not listed).
std::vector<int64_t> checkpoint_steps(const std::filesystem::path& run_dir);

// The checkpoint folder of `step`; a step the run has no checkpoint of is an InputError listing the steps it has.
std::filesystem::path checkpoint_at_step(const std::filesystem::path& run_dir, int64_t step);

}  // namespace retort::distill
