#include "distill/train/checkpoint_steps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>

#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// The step a folder name stands for, or nothing for another name.
std::optional<int64_t> step_of(const std::string& name) {
  if (!name.starts_with("step_")) return std::nullopt;
  int64_t step = 0;
  const char* digits = name.data() + 5;
  const auto [end, error] = std::from_chars(digits, name.data() + name.size(), step);
  if (error != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return step;
}

}  // namespace

std::vector<fs::path> checkpoint_step_folders(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(root)) return {};
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    if (const auto step = step_of(entry.path().filename().string())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> folders;
  for (auto& [step, folder] : found) folders.push_back(std::move(folder));
  return folders;
}

std::vector<int64_t> checkpoint_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  for (const fs::path& folder : checkpoint_step_folders(run_dir / "checkpoints"))
    steps.push_back(*step_of(folder.filename().string()));
  return steps;
}

fs::path checkpoint_at_step(const fs::path& run_dir, int64_t step) {
  const std::vector<int64_t> steps = checkpoint_steps(run_dir);
  RETORT_INPUT_CHECK(!steps.empty(), "--step {}: the run '{}' has no checkpoint: train it first", step,
                     run_dir.string());
  RETORT_INPUT_CHECK(std::find(steps.begin(), steps.end(), step) != steps.end(),
                     "--step {}: the run '{}' has no checkpoint of step {}; it has step(s) {} (train.keep_checkpoints "
                     "says how many are kept): pass one of them, or leave --step out for the latest",
                     step, run_dir.string(), step, fmt::join(steps, ", "));
  return run_dir / "checkpoints" / fmt::format("step_{:08d}", step);
}

}  // namespace retort::distill
