#pragma once
// Writing a Llama-family model as a Hugging Face checkpoint folder: config.json (the keys transformers 5 writes:
// model_type, architectures, sizes, rope_parameters, tie_word_embeddings, ...) and model.safetensors in float32
// under the Hugging Face parameter names (the model's own; a dense model has no padded vocabulary rows). The inverse of
// hf_checkpoint.h: load_hf_model of the folder gives the same model.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "parallel/models/gpt_model.h"

namespace retort {

// config.json's content for `config` (a llama, qwen2 or qwen3 configuration; an InputError for gpt).
nlohmann::json hf_config_json(const GptConfig& config);

// Writes config.json and model.safetensors of a dense (tp 1) model on any device into `folder` (created).
// Returns the number of tensors written.
size_t save_hf_folder(const GptModel& model, const std::filesystem::path& folder);

}  // namespace retort
