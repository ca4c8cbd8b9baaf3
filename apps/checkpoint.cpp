#include "apps/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"

namespace retort::apps {

namespace fs = std::filesystem;

namespace {

fs::path checkpoints_root(const fs::path& run_dir) {
  return run_dir / "checkpoints";
}

std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> dirs;
  if (!fs::exists(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step_")) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const nn::Module& model,
                         const optim::Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last) {
  const fs::path root = checkpoints_root(run_dir);
  fs::create_directories(root);
  const fs::path final_dir = root / fmt::format("step_{:08d}", step);
  const fs::path temp_dir = root / fmt::format(".tmp_step_{:08d}_{}", step, ::getpid());
  fs::remove_all(temp_dir);
  fs::create_directories(temp_dir);

  save_safetensors(temp_dir / "model.safetensors", model.state_dict(), {{"format", "retort"}});
  const auto opt_state = optimizer.state();
  save_safetensors(temp_dir / "optimizer.safetensors", opt_state.tensors, opt_state.metadata);
  nlohmann::json state = trainer_state;
  state["step"] = step;
  write_text_atomic(temp_dir / "trainer.json", state.dump(2));

  // Replacing an existing folder of the same step (a re-run after a resume) must not lose it midway:
  // move the old one aside first, then rename the new one in.
  const fs::path stale = root / fmt::format(".old_step_{:08d}", step);
  if (fs::exists(final_dir)) {
    fs::remove_all(stale);
    fs::rename(final_dir, stale);
  }
  fs::rename(temp_dir, final_dir);
  write_text_atomic(root / "latest", final_dir.filename().string() + "\n");
  fs::remove_all(stale);

  auto dirs = complete_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < dirs.size(); ++i) fs::remove_all(dirs[i]);
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path pointer = checkpoints_root(run_dir) / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = checkpoints_root(run_dir) / name;
  RETORT_INPUT_CHECK(fs::is_directory(dir),
                     "{} names checkpoint '{}', which does not exist: remove the file to "
                     "start over, or restore the folder",
                     pointer.string(), name);
  return dir;
}

nlohmann::json load_checkpoint(const fs::path& dir, nn::Module& model, optim::Optimizer& optimizer) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer.json"})
    RETORT_INPUT_CHECK(fs::exists(dir / file), "checkpoint {} has no {}: it is incomplete", dir.string(), file);
  model.load_state_dict(load_safetensors(dir / "model.safetensors").tensors);
  auto opt = load_safetensors(dir / "optimizer.safetensors");
  optimizer.load_state({opt.tensors, opt.metadata});
  try {
    return nlohmann::json::parse(read_file(dir / "trainer.json"));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(
        fmt::format("{}/trainer.json is not valid JSON ({}): the checkpoint is corrupt", dir.string(), e.what()));
  }
}

}  // namespace retort::apps
