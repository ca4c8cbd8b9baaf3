#include "distill/train/model_run_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/util/error.h"
#include "parallel/models/hf_config.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

bool is_training_run(const fs::path& dir) {
  return fs::exists(dir / "config.yaml") && fs::is_directory(dir / "checkpoints");
}

std::string quoted_list(const std::vector<fs::path>& paths) {
  std::string out;
  for (const fs::path& p : paths) out += (out.empty() ? "" : ", ") + p.string();
  return out;
}

}  // namespace

std::vector<fs::path> runs_inside(const fs::path& dir) {
  std::vector<fs::path> runs;
  if (!fs::is_directory(dir)) return runs;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && is_training_run(entry.path())) runs.push_back(entry.path());
  std::sort(runs.begin(), runs.end());
  return runs;
}

void check_model_run_dir(const fs::path& dir, const std::string& flag) {
  RETORT_INPUT_CHECK(fs::is_directory(dir), "{} {}: no such folder: give the run folder of a trained model", flag,
                     dir.string());
  // A Hugging Face checkpoint folder is a model too (load_trained_model reads it).
  if (is_training_run(dir) || (is_hf_checkpoint_folder(dir) && !fs::exists(dir / "config.yaml"))) return;
  fs::path normal = dir.lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "run/checkpoints/step_00000400/"
  const fs::path parent = normal.parent_path();
  const std::string name = normal.filename().string();
  // .../RUN/checkpoints/step_00000400
  if (name.starts_with("step_") && parent.filename() == "checkpoints" && is_training_run(parent.parent_path())) {
    int64_t step = 0;
    std::from_chars(name.data() + 5, name.data() + name.size(), step);
    throw InputError(fmt::format(
        "{} {} is one checkpoint of the run {}: pass the run folder, with --step to pick this checkpoint: {} {} "
        "--step {}",
        flag, dir.string(), parent.parent_path().string(), flag, parent.parent_path().string(), step));
  }
  if (name == "checkpoints" && is_training_run(parent))
    throw InputError(
        fmt::format("{} {} is the checkpoints folder of the run {}: pass the run folder ({} {}), with "
                    "--step N for a checkpoint other than the latest",
                    flag, dir.string(), parent.string(), flag, parent.string()));
  const std::vector<fs::path> runs = runs_inside(dir);
  if (!runs.empty())
    throw InputError(
        fmt::format("{} {} holds {} runs, not one model (a `retort distill run` folder?): pass one of "
                    "them: {}",
                    flag, dir.string(), runs.size(), quoted_list(runs)));
  RETORT_INPUT_CHECK(fs::exists(dir / "config.yaml"),
                     "{} {} is not a retort run folder (it has no config.yaml) nor a Hugging Face checkpoint folder "
                     "(config.json with model.safetensors or model.safetensors.index.json): give the run folder of a "
                     "`retort train` or `retort distill train` model, or a Hugging Face model folder",
                     flag, dir.string());
  throw InputError(
      fmt::format("{} {}: the run has no checkpoint yet: train it first (it must finish a step)", flag, dir.string()));
}

}  // namespace retort::distill
