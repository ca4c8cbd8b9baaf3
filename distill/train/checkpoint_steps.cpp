#include "distill/train/checkpoint_steps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

std::vector<int64_t> checkpoint_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  const fs::path root = run_dir / "checkpoints";
  if (!fs::is_directory(root)) return steps;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with("step_")) continue;
    int64_t step = 0;
    const char* digits = name.data() + 5;
    const auto [end, error] = std::from_chars(digits, name.data() + name.size(), step);
    if (error == std::errc() && end == name.data() + name.size()) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
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
