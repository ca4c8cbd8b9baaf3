#pragma once
// `retort export`: a trained llama / qwen2 / qwen3 run written as a Hugging Face checkpoint folder (config.json,
// model.safetensors; parallel/models/hf_export.h) with the run's tokenizer beside it, from its latest checkpoint
// (written at any tp: the weights are re-assembled for one rank).
#include <filesystem>
#include <optional>
#include <string>

namespace retort::distill {

struct HfExportSummary {
  std::filesystem::path checkpoint;  // the checkpoint the weights came from
  std::filesystem::path out_dir;
  std::string family;
  size_t tensors = 0;
  std::optional<std::filesystem::path> tokenizer;  // the copied tokenizer file, if the run has one
};

HfExportSummary export_run_to_hf(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir);

}  // namespace retort::distill
