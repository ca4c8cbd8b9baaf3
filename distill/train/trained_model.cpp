#include "distill/train/trained_model.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/autograd/grad_mode.h"
#include "core/config/config.h"
#include "core/util/error.h"
#include "distill/distill_config.h"
#include "distill/train/checkpoint.h"
#include "distill/train/checkpoint_steps.h"
#include "distill/train/config_builders.h"
#include "distill/train/run_tokenizer.h"
#include "parallel/models/hf_checkpoint.h"
#include "parallel/models/hf_config.h"

namespace retort::distill {

namespace fs = std::filesystem;

ResolvedConfig load_run_config(const fs::path& run_dir) {
  const fs::path file = run_dir / "config.yaml";
  RETORT_INPUT_CHECK(fs::exists(file),
                     "'{}' is not a retort run directory (it has no config.yaml): give the run directory of a "
                     "`retort train` or `retort distill run` model",
                     run_dir.string());
  return Config::load(file).resolve(distill_schema());
}

namespace {

std::string tokenizer_fingerprint_of(const fs::path& data_dir) {
  const fs::path manifest = data_dir / "manifest.json";
  RETORT_INPUT_CHECK(fs::exists(manifest),
                     "the data folder '{}' of the model has no manifest.json: prepare its data again (retort train "
                     "does) or point data.dir at it",
                     data_dir.string());
  std::ifstream in(manifest);
  try {
    return nlohmann::json::parse(in).value("tokenizer_fingerprint", std::string());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{} is not valid JSON ({}): prepare the data again", manifest.string(), e.what()));
  }
}

// The fingerprint of the tokenizer the run was trained with: its own record, or for an older run its data folder's
// manifest.
std::string recorded_tokenizer_fingerprint(const fs::path& run_dir, const ResolvedConfig& config) {
  const std::optional<RunTokenizerRecord> kept = read_run_tokenizer_record(run_dir);
  if (!kept) return tokenizer_fingerprint_of(config.get_string("data.dir"));
  // A fine-tuned Hugging Face model's vocabulary is its tokenizer's, whatever data.vocab_size says.
  RETORT_INPUT_CHECK(!config.get_string("model.from").empty() || kept->vocab_size == config.get_int("data.vocab_size"),
                     "the run '{}' records a tokenizer of {} ids ({}) but its config.yaml has data.vocab_size = {}: "
                     "the run folder was edited; restore its config.yaml",
                     run_dir.string(), kept->vocab_size, kRunTokenizerRecord, config.get_int("data.vocab_size"));
  return kept->fingerprint;
}

// The tokenizer of a Hugging Face folder: its tokenizer.json (data::Tokenizer reads tokenizer.json files).
data::Tokenizer hf_folder_tokenizer(const fs::path& folder) {
  const fs::path file = folder / "tokenizer.json";
  RETORT_INPUT_CHECK(fs::exists(file),
                     "the Hugging Face folder '{}' has no tokenizer.json: its token ids cannot be read from or turned "
                     "into text; copy the model's tokenizer.json into it",
                     folder.string());
  return data::Tokenizer::load(file);
}

// A Hugging Face checkpoint folder as a trained model: the sizes from config.json, the weights from the
// safetensors (each rank reading its own slices), the tokenizer identity from tokenizer.json.
TrainedModel load_hf_folder_model(const fs::path& folder, Device device, std::shared_ptr<Communicator> tp_group) {
  TrainedModel trained;
  trained.run_dir = folder;
  trained.checkpoint = folder;
  trained.model = std::make_unique<GptModel>(gpt_config_from_hf(folder), std::move(tp_group));
  load_hf_weights(*trained.model, folder);
  const data::Tokenizer tokenizer = hf_folder_tokenizer(folder);
  // The head may have more rows than the tokenizer has ids (Qwen pads it); the data's ids are the tokenizer's.
  RETORT_INPUT_CHECK(tokenizer.vocab_size() <= trained.model->config().vocab_size,
                     "the tokenizer.json of '{}' has {} ids but the model's vocab_size is {}: they are not a pair",
                     folder.string(), tokenizer.vocab_size(), trained.model->config().vocab_size);
  trained.vocab_size = tokenizer.vocab_size();
  trained.tokenizer_fingerprint = tokenizer.fingerprint();
  trained.model->to(device);
  return trained;
}

}  // namespace

namespace {

// The vocabulary a run's model was trained with: data.vocab_size, except for a fine-tuned Hugging Face model, whose
// vocabulary is its tokenizer's (data.vocab_size does not apply to it and keeps its default).
int64_t run_vocab_size(const fs::path& run_dir, const ResolvedConfig& config) {
  if (!config.get_string("model.from").empty())
    if (const std::optional<RunTokenizerRecord> kept = read_run_tokenizer_record(run_dir)) return kept->vocab_size;
  return config.get_int("data.vocab_size");
}

}  // namespace

TrainedModel load_trained_model(const fs::path& run_dir, Device device, std::shared_ptr<Communicator> tp_group,
                                std::optional<int64_t> step) {
  if (is_hf_checkpoint_folder(run_dir) && !fs::exists(run_dir / "config.yaml")) {
    RETORT_INPUT_CHECK(!step.has_value(),
                       "'{}' is a Hugging Face checkpoint folder: it has one set of weights, no step {}",
                       run_dir.string(), step.value_or(0));
    return load_hf_folder_model(run_dir, device, std::move(tp_group));
  }
  const ResolvedConfig config = load_run_config(run_dir);
  const auto checkpoint =
      step ? std::optional<fs::path>(checkpoint_at_step(run_dir, *step)) : latest_checkpoint(run_dir);
  RETORT_INPUT_CHECK(checkpoint.has_value(), "the run '{}' has no checkpoint: train it first (it must finish a step)",
                     run_dir.string());
  TrainedModel trained;
  trained.run_dir = run_dir;
  trained.checkpoint = *checkpoint;
  trained.vocab_size = run_vocab_size(run_dir, config);
  trained.tokenizer_fingerprint = recorded_tokenizer_fingerprint(run_dir, config);
  trained.dtype = dtype_from_name(config.get_string("model.dtype"));
  trained.model = std::make_unique<GptModel>(gpt_config_from(config, trained.vocab_size), tp_group);
  CheckpointShard shard;
  if (tp_group) {
    shard.tp_rank = tp_group->rank();
    shard.tp_size = tp_group->size();
  }
  const nlohmann::json state = load_model_weights(*checkpoint, *trained.model, shard);
  trained.step = state.value("step", int64_t{0});
  trained.model->to(device);
  return trained;
}

data::Tokenizer load_run_tokenizer(const TrainedModel& model) {
  if (is_hf_checkpoint_folder(model.run_dir) && !fs::exists(model.run_dir / "config.yaml"))
    return hf_folder_tokenizer(model.run_dir);
  if (const std::optional<RunTokenizerRecord> kept = read_run_tokenizer_record(model.run_dir)) {
    RETORT_INPUT_CHECK(kept->file.has_value(),
                       "the run '{}' was trained on pre-tokenized shards (data.shards) without a tokenizer, so its "
                       "token ids cannot be turned into text or read from text: train it with data.tokenizer set to "
                       "the tokenizer (.model or tokenizer.json) that made the shards",
                       model.run_dir.string());
    RETORT_INPUT_CHECK(fs::exists(*kept->file),
                       "the tokenizer of the run '{}' is missing: {} does not exist (it was copied there when the run "
                       "was trained); restore it from a copy of the run, or from '{}' if that file is unchanged",
                       model.run_dir.string(), kept->file->string(), kept->source);
    data::Tokenizer tokenizer = data::Tokenizer::load(*kept->file);
    RETORT_INPUT_CHECK(
        tokenizer.fingerprint() == model.tokenizer_fingerprint && tokenizer.vocab_size() == model.vocab_size,
        "{} (tokenizer {}, vocabulary {}) is not the tokenizer the run '{}' was trained with (tokenizer {}, "
        "vocabulary {}, recorded in {}): the file was replaced; restore it from a copy of the run",
        kept->file->string(), tokenizer.fingerprint(), tokenizer.vocab_size(), model.run_dir.string(),
        model.tokenizer_fingerprint, model.vocab_size, kRunTokenizerRecord);
    return tokenizer;
  }
  // A run made before runs kept their tokenizer: its data folder's, which must still be the one it was made with.
  const fs::path data_dir = load_run_config(model.run_dir).get_string("data.dir");
  const fs::path file = data_dir / "tokenizer.model";
  RETORT_INPUT_CHECK(fs::exists(file),
                     "the tokenizer of the run '{}' is missing: {} does not exist (run the command from the folder "
                     "the model was trained in, or prepare its data again with the same data.corpus and "
                     "data.vocab_size)",
                     model.run_dir.string(), file.string());
  data::Tokenizer tokenizer = data::Tokenizer::load(file);
  RETORT_INPUT_CHECK(
      tokenizer.fingerprint() == model.tokenizer_fingerprint && tokenizer.vocab_size() == model.vocab_size,
      "{} (tokenizer {}, vocabulary {}) does not match the run '{}' (its data folder's manifest.json "
      "names tokenizer {}, the model has a vocabulary of {}): the data folder changed since the model "
      "was trained; prepare it again from the run's data.corpus and data.vocab_size",
      file.string(), tokenizer.fingerprint(), tokenizer.vocab_size(), model.run_dir.string(),
      model.tokenizer_fingerprint, model.vocab_size);
  return tokenizer;
}

data::Tokenizer load_run_tokenizer(const fs::path& run_dir) {
  if (is_hf_checkpoint_folder(run_dir) && !fs::exists(run_dir / "config.yaml")) return hf_folder_tokenizer(run_dir);
  // Only what the tokenizer is checked against; no weights are loaded.
  const ResolvedConfig config = load_run_config(run_dir);
  TrainedModel identity;
  identity.run_dir = run_dir;
  identity.vocab_size = run_vocab_size(run_dir, config);
  identity.tokenizer_fingerprint = recorded_tokenizer_fingerprint(run_dir, config);
  return load_run_tokenizer(identity);
}

Tensor inference_logits(const TrainedModel& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  return model.model->forward(tokens, model.dtype);
}

void check_same_tokenizer(const TrainedModel& model, const std::string& tokenizer_fingerprint, int64_t vocab_size,
                          const std::string& role) {
  RETORT_INPUT_CHECK(
      model.vocab_size == vocab_size && model.tokenizer_fingerprint == tokenizer_fingerprint,
      "the {} '{}' uses tokenizer {} (vocabulary {}) but this data uses tokenizer {} (vocabulary {}): "
      "give a model trained on the same data.dir and data.vocab_size{}",
      role, model.run_dir.string(), model.tokenizer_fingerprint, model.vocab_size, tokenizer_fingerprint, vocab_size,
      role == "teacher" ? ", or set distill.xtoken.enabled=true to distil across the two tokenizers" : "");
}

}  // namespace retort::distill
