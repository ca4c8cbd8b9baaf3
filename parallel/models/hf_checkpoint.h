#pragma once
// Loading a Hugging Face checkpoint folder (config.json, model.safetensors or model.safetensors.index.json with its
// shards) into the decoder. The Llama-family modules carry the Hugging Face names, so each checkpoint tensor is the
// parameter of the same name; each rank reads only the rows (or columns) its parameter's sharding spec gives it,
// from memory-mapped files, converting F32, BF16 and F16 to the parameter's dtype.
#include <filesystem>
#include <memory>

#include "parallel/models/gpt_model.h"

namespace retort {

// The model of `folder` (its config.json) on `tp_group` (null: dense), its weights loaded.
std::shared_ptr<GptModel> load_hf_model(const std::filesystem::path& folder,
                                        std::shared_ptr<Communicator> tp_group = nullptr);

// Loads the weights of `folder` into `model` (a Llama-family model of the checkpoint's sizes). InputErrors name
// the tensor: one the model needs that no file has, one the checkpoint has that the model does not, a shape that
// differs, a dtype that is not F32, BF16 or F16. Padded vocabulary rows are zero.
void load_hf_weights(GptModel& model, const std::filesystem::path& folder);

}  // namespace retort
