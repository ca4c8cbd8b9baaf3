#pragma once
// The folder a user gives as "the model" (`retort eval --checkpoint DIR`) must be one run's folder: its config.yaml
// and checkpoints/. Folders close to it are easy to give by mistake: a `distill run` folder (which holds the teacher
// and both students), a checkpoint's step folder, the checkpoints/ folder itself. Each gets an error that names the
// folder to pass instead.
#include <filesystem>
#include <string>
#include <vector>

namespace retort::distill {

// The folders directly under `dir` that are training runs (a config.yaml and a checkpoints/ folder), sorted.
std::vector<std::filesystem::path> runs_inside(const std::filesystem::path& dir);

// Nothing when `dir` is a training run's folder; otherwise an InputError that starts with `flag` ("--checkpoint")
// and says which folder to pass: the run of a step folder (with --step N), or the candidate runs of a folder that
// holds several.
void check_model_run_dir(const std::filesystem::path& dir, const std::string& flag);

}  // namespace retort::distill
