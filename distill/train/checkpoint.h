#pragma once
// Checkpoints: <run>/checkpoints/step_NNNNNNNN/ holding model.safetensors, optimizer.safetensors and
// trainer.json (step, data position, seeds). A checkpoint is written into a temporary folder and renamed
// into place, then <run>/checkpoints/latest is replaced atomically, so a crash at any moment leaves the
// previous checkpoint intact and `latest` always names a complete one.
// Under tensor parallelism each tp rank writes its own shard (model-tp01-of-04.safetensors and the matching
// optimizer file; trainer.json records tp) into the same folder; the main rank alone creates, renames and
// points `latest`, with barriers between, so the folder only appears once every shard is in it. The main rank also
// writes the folder's manifest.json (every file's size and content hash, checkpoint_integrity.h), and every load
// checks it first.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/nn/module.h"
#include "optim/optimizer.h"

namespace retort::distill {

// Which part of a checkpoint this process writes and reads. The default is a single process.
struct CheckpointShard {
  int tp_rank = 0, tp_size = 1;
  bool writes = true;             // one replica of each tp shard writes (dp rank 0)
  bool main = true;               // creates and publishes the folder (world rank 0)
  std::function<void()> barrier;  // over every rank that calls save_checkpoint; empty for a single process

  std::string file(const std::string& stem) const;  // "model.safetensors" or "model-tp01-of-04.safetensors"
};

// Collective over every rank when shard.barrier is set.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const nn::Module& model,
                                      const optim::Optimizer& optimizer, const nlohmann::json& trainer_state,
                                      int keep_last, const CheckpointShard& shard = {});

// The folder `latest` names, or nothing when the run has no checkpoint yet.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Loads this shard's weights and optimizer state in place and returns trainer.json. A checkpoint written at
// another tp is an InputError naming both.
nlohmann::json load_checkpoint(const std::filesystem::path& checkpoint_dir, nn::Module& model,
                               optim::Optimizer& optimizer, const CheckpointShard& shard = {});

// Loads only this shard's weights (inference: a teacher, an evaluation, generation) and returns trainer.json. A
// checkpoint written at another tp is re-split: a model trained at tp 1 can be served at tp 2 and the other way.
nlohmann::json load_model_weights(const std::filesystem::path& checkpoint_dir, nn::Module& model,
                                  const CheckpointShard& shard = {});

}  // namespace retort::distill
