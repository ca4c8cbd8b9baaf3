#include "distill/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "distill/train/checkpoint_integrity.h"
#include "distill/train/checkpoint_steps.h"
#include "parallel/tp/sharding.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

fs::path checkpoints_root(const fs::path& run_dir) {
  return run_dir / "checkpoints";
}

}  // namespace

std::string CheckpointShard::file(const std::string& stem) const {
  if (tp_size == 1) return stem + ".safetensors";
  return fmt::format("{}-tp{:02d}-of-{:02d}.safetensors", stem, tp_rank, tp_size);
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const nn::Module& model,
                         const optim::Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last,
                         const CheckpointShard& shard) {
  auto barrier = [&] {
    if (shard.barrier) shard.barrier();
  };
  const fs::path root = checkpoints_root(run_dir);
  const fs::path final_dir = root / fmt::format("step_{:08d}", step);
  // Every rank must name the same folder, so no pid in it; a leftover from a crash is removed first.
  const fs::path temp_dir = root / fmt::format(".tmp_step_{:08d}", step);
  if (shard.main) {
    fs::create_directories(root);
    fs::remove_all(temp_dir);
    fs::create_directories(temp_dir);
  }
  barrier();
  if (shard.writes) {
    save_safetensors(
        temp_dir / shard.file("model"), model.state_dict(),
        {{"format", "retort"}, {"tp_rank", std::to_string(shard.tp_rank)}, {"tp_size", std::to_string(shard.tp_size)}});
    const auto opt_state = optimizer.state();
    save_safetensors(temp_dir / shard.file("optimizer"), opt_state.tensors, opt_state.metadata);
  }
  if (shard.main) {
    nlohmann::json state = trainer_state;
    state["step"] = step;
    state["tp"] = shard.tp_size;
    write_text_atomic(temp_dir / "trainer.json", state.dump(2));
  }
  barrier();
  if (shard.main) {
    write_checkpoint_manifest(temp_dir);  // every shard's files are in: record what a load must find
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
    auto dirs = checkpoint_step_folders(root);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < dirs.size(); ++i) fs::remove_all(dirs[i]);
  }
  barrier();
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

namespace {

nlohmann::json parse_trainer_state(const fs::path& dir) {
  RETORT_INPUT_CHECK(fs::exists(dir / "trainer.json"), "checkpoint {} has no trainer.json: it is incomplete",
                     dir.string());
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(dir / "trainer.json"));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(
        fmt::format("{}/trainer.json is not valid JSON ({}): the checkpoint is corrupt", dir.string(), e.what()));
  }
  return state;
}

nlohmann::json read_trainer_state(const fs::path& dir, const CheckpointShard& shard) {
  nlohmann::json state = parse_trainer_state(dir);
  const int saved_tp = state.value("tp", 1);
  RETORT_INPUT_CHECK(saved_tp == shard.tp_size,
                     "checkpoint {} was written with parallel.tp = {} but this run has parallel.tp = {}: resume with "
                     "parallel.tp={}",
                     dir.string(), saved_tp, shard.tp_size, saved_tp);
  return state;
}

// Weights written at tp = saved_tp, re-split for this shard: every saved shard of a parameter is read, the full
// tensor assembled along the layout the model's layers record, and this rank's part cut from it.
NamedTensors resharded_weights(const fs::path& dir, const nn::Module& model, int saved_tp,
                               const CheckpointShard& shard) {
  std::vector<SafetensorsFile> saved;
  for (int r = 0; r < saved_tp; ++r) {
    CheckpointShard source;
    source.tp_rank = r;
    source.tp_size = saved_tp;
    RETORT_INPUT_CHECK(fs::exists(dir / source.file("model")), "checkpoint {} has no {}: it is incomplete",
                       dir.string(), source.file("model"));
    saved.push_back(load_safetensors(dir / source.file("model")));
  }
  NamedTensors local;
  for (const auto& [name, param] : model.named_parameters()) {
    std::vector<Tensor> shards;
    for (const SafetensorsFile& file : saved) shards.push_back(file.get(name));
    Tensor full = tp::assemble_full(shards, param.sharding());
    // A vocabulary padded to a multiple of the saved tp is re-padded to this tp's multiple.
    const int dim = param.sharding().partition_dim;
    if (dim >= 0) full = tp::fit_extent(full, dim, tp::full_shape(param.shape(), param.sharding(), shard.tp_size)[dim]);
    local.emplace_back(name, tp::shard_of(full, param.sharding(), shard.tp_rank, shard.tp_size));
  }
  return local;
}

}  // namespace

nlohmann::json load_model_weights(const fs::path& dir, nn::Module& model, const CheckpointShard& shard) {
  verify_checkpoint(dir);
  nlohmann::json state = parse_trainer_state(dir);
  const int saved_tp = state.value("tp", 1);
  if (saved_tp == shard.tp_size) {
    RETORT_INPUT_CHECK(fs::exists(dir / shard.file("model")), "checkpoint {} has no {}: it is incomplete", dir.string(),
                       shard.file("model"));
    model.load_state_dict(load_safetensors(dir / shard.file("model")).tensors);
  } else {
    model.load_state_dict(resharded_weights(dir, model, saved_tp, shard));
  }
  return state;
}

nlohmann::json load_checkpoint(const fs::path& dir, nn::Module& model, optim::Optimizer& optimizer,
                               const CheckpointShard& shard) {
  verify_checkpoint(dir);
  nlohmann::json state = read_trainer_state(dir, shard);
  for (const std::string& file : {shard.file("model"), shard.file("optimizer")})
    RETORT_INPUT_CHECK(fs::exists(dir / file), "checkpoint {} has no {}: it is incomplete", dir.string(), file);
  model.load_state_dict(load_safetensors(dir / shard.file("model")).tensors);
  auto opt = load_safetensors(dir / shard.file("optimizer"));
  optimizer.load_state({opt.tensors, opt.metadata});
  return state;
}

}  // namespace retort::distill
