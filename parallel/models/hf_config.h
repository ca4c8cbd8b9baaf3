#pragma once
// Hugging Face checkpoint folders: config.json read into the model configuration of the family it names (llama,
// qwen2, qwen3). Every key that changes the math is read or refused; nothing is guessed.
#include <filesystem>

#include "parallel/models/gpt_model.h"

namespace retort {

// True when `folder` holds a config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_checkpoint_folder(const std::filesystem::path& folder);

// The model configuration of `folder`/config.json. InputErrors name the key: an unknown model_type or
// architecture, a missing size, a rope type other than default and llama3, an activation other than silu, sliding
// windows, MLP biases.
GptConfig gpt_config_from_hf(const std::filesystem::path& folder);

}  // namespace retort
