#pragma once
// A model trained by `retort train` (or a distillation command), loaded for inference from its run directory:
// the shape from config.yaml, the weights from the latest checkpoint. The teacher of distillation and the
// models `retort eval` scores are loaded this way.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/config/resolved_config.h"
#include "core/data/tokenizer.h"
#include "core/tensor/device.h"
#include "parallel/comm/communicator.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

struct TrainedModel {
  std::unique_ptr<GptModel> model;
  std::filesystem::path run_dir;
  std::filesystem::path checkpoint;
  // Recorded in the run folder (run_tokenizer.h); for older runs, their data folder's manifest.json.
  std::string tokenizer_fingerprint;
  int64_t vocab_size = 0;
  DType dtype = DType::F32;
  int64_t step = 0;
};

// The run's config.yaml, resolved (distillation keys included, with their defaults for a plain training run).
ResolvedConfig load_run_config(const std::filesystem::path& run_dir);

// Loads the run's latest checkpoint (or the one of `step`) onto `device`, split over tp_group (null: one rank). A
// folder that is not a run directory, holds no checkpoint, or none of `step`, is an InputError.
// A Hugging Face checkpoint folder (config.json + safetensors + tokenizer.json, parallel/models/hf_checkpoint.h) is
// accepted wherever a run directory is: its tokenizer is its tokenizer.json, its step 0.
TrainedModel load_trained_model(const std::filesystem::path& run_dir, Device device,
                                std::shared_ptr<Communicator> tp_group = nullptr,
                                std::optional<int64_t> step = std::nullopt);

// The tokenizer the model was trained with: the run's own copy (RUN/tokenizer.model or RUN/tokenizer.json, checked
// against the fingerprint the run recorded); for a run made before runs kept a copy, tokenizer.model of its data
// folder, which must still be the one the run's data was made with. Either way a mismatch is an InputError naming
// the file, and so is a run trained on pre-tokenized shards without a tokenizer.
data::Tokenizer load_run_tokenizer(const TrainedModel& model);
// The same for a run folder whose model is not loaded (e.g. to tokenize text for it).
data::Tokenizer load_run_tokenizer(const std::filesystem::path& run_dir);

// The model's forward without the tape: logits [B, T, V_local] of tokens i32 [B, T] on the model's device.
Tensor inference_logits(const TrainedModel& model, const Tensor& tokens);

// An InputError unless `model` uses the tokenizer of the student's data (fingerprint and vocabulary size).
void check_same_tokenizer(const TrainedModel& model, const std::string& tokenizer_fingerprint, int64_t vocab_size,
                          const std::string& role);

}  // namespace retort::distill
