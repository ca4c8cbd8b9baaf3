#pragma once
// Checkpoints: <run>/checkpoints/step_NNNNNNNN/ holding model.safetensors, optimizer.safetensors and
// trainer.json (step, data position, seeds). A checkpoint is written into a temporary folder and renamed
// into place, then <run>/checkpoints/latest is replaced atomically, so a crash at any moment leaves the
// previous checkpoint intact and `latest` always names a complete one.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/nn/module.h"
#include "optim/optimizer.h"

namespace retort::apps {

std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const nn::Module& model,
                                      const optim::Optimizer& optimizer, const nlohmann::json& trainer_state,
                                      int keep_last);

// The folder `latest` names, or nothing when the run has no checkpoint yet.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Loads weights and optimizer state in place and returns trainer.json.
nlohmann::json load_checkpoint(const std::filesystem::path& checkpoint_dir, nn::Module& model,
                               optim::Optimizer& optimizer);

}  // namespace retort::apps
