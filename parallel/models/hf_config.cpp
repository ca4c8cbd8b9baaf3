#include "parallel/models/hf_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/util/error.h"

namespace retort {
namespace {

using Json = nlohmann::json;

struct ConfigFile {
  std::string path;
  Json json;

  bool has(const std::string& key) const { return json.contains(key) && !json[key].is_null(); }

  int64_t get_int(const std::string& key) const {
    RETORT_INPUT_CHECK(has(key), "'{}' has no \"{}\": a Hugging Face decoder config needs it", path, key);
    RETORT_INPUT_CHECK(json[key].is_number_integer(), "'{}': \"{}\" must be an integer, got {}", path, key,
                       json[key].dump());
    return json[key].get<int64_t>();
  }
  int64_t get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }
  double get_double(const Json& object, const std::string& key, const std::string& where) const {
    RETORT_INPUT_CHECK(object.contains(key) && object[key].is_number(), "'{}': {}\"{}\" must be a number, got {}", path,
                       where, key, object.contains(key) ? object[key].dump() : "nothing");
    return object[key].get<double>();
  }
  bool get_bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    RETORT_INPUT_CHECK(json[key].is_boolean(), "'{}': \"{}\" must be true or false, got {}", path, key,
                       json[key].dump());
    return json[key].get<bool>();
  }
};

ConfigFile read_config(const std::filesystem::path& folder) {
  ConfigFile file{(folder / "config.json").string(), {}};
  std::ifstream stream(file.path);
  RETORT_INPUT_CHECK(stream.good(), "cannot read '{}': a Hugging Face checkpoint folder has a config.json", file.path);
  try {
    file.json = Json::parse(stream);
  } catch (const Json::exception& error) {
    throw InputError(fmt::format("'{}' is not valid JSON ({})", file.path, error.what()));
  }
  RETORT_INPUT_CHECK(file.json.is_object(), "'{}' is not a JSON object", file.path);
  return file;
}

// Newer transformers write rope_parameters {rope_type, rope_theta, ...}; older ones rope_theta beside an optional
// rope_scaling {rope_type or type, factor, ...}.
RopeConfig read_rope(const ConfigFile& file) {
  RopeConfig rope;
  Json params = Json::object();
  std::string where;
  if (file.has("rope_parameters")) {
    params = file.json["rope_parameters"];
    where = "rope_parameters.";
    RETORT_INPUT_CHECK(params.is_object(), "'{}': \"rope_parameters\" must be an object, got {}", file.path,
                       params.dump());
    rope.theta = file.get_double(params, "rope_theta", where);
  } else {
    rope.theta = file.has("rope_theta") ? file.get_double(file.json, "rope_theta", "") : 10000.0;
    if (file.has("rope_scaling")) {
      params = file.json["rope_scaling"];
      where = "rope_scaling.";
      RETORT_INPUT_CHECK(params.is_object(), "'{}': \"rope_scaling\" must be an object or null, got {}", file.path,
                         params.dump());
    }
  }
  const char* type_key = params.contains("rope_type") ? "rope_type" : "type";
  if (params.contains(type_key)) {
    RETORT_INPUT_CHECK(params[type_key].is_string(), "'{}': \"{}{}\" must be a string, got {}", file.path, where,
                       type_key, params[type_key].dump());
    rope.type = params[type_key].get<std::string>();
  }
  RETORT_INPUT_CHECK(rope.type == "default" || rope.type == "llama3",
                     "'{}': \"{}{}\" is '{}', a rope type retort does not implement (it implements 'default' and "
                     "'llama3')",
                     file.path, where, type_key, rope.type);
  if (rope.type == "llama3") {
    rope.factor = file.get_double(params, "factor", where);
    rope.low_freq_factor = file.get_double(params, "low_freq_factor", where);
    rope.high_freq_factor = file.get_double(params, "high_freq_factor", where);
    rope.original_max_position =
        static_cast<int64_t>(file.get_double(params, "original_max_position_embeddings", where));
  }
  rope.validate();
  return rope;
}

}  // namespace

bool is_hf_checkpoint_folder(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  return fs::is_regular_file(folder / "config.json") && (fs::is_regular_file(folder / "model.safetensors") ||
                                                         fs::is_regular_file(folder / "model.safetensors.index.json"));
}

GptConfig gpt_config_from_hf(const std::filesystem::path& folder) {
  const ConfigFile file = read_config(folder);
  RETORT_INPUT_CHECK(file.has("model_type") && file.json["model_type"].is_string(),
                     "'{}' has no \"model_type\": retort reads llama, qwen2 and qwen3 checkpoints", file.path);
  const std::string type = file.json["model_type"].get<std::string>();
  static const std::map<std::string, std::string> kArchitectures = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  const auto known = kArchitectures.find(type);
  RETORT_INPUT_CHECK(known != kArchitectures.end(),
                     "'{}': \"model_type\" is '{}', a family retort does not build (it reads llama, qwen2 and qwen3)",
                     file.path, type);
  if (file.has("architectures")) {
    const Json& architectures = file.json["architectures"];
    RETORT_INPUT_CHECK(architectures.is_array() && architectures.size() == 1 && architectures[0].is_string() &&
                           architectures[0].get<std::string>() == known->second,
                       "'{}': \"architectures\" is {}, but a {} checkpoint retort reads is [\"{}\"]", file.path,
                       architectures.dump(), type, known->second);
  }
  const std::string act = file.has("hidden_act") ? file.json["hidden_act"].dump() : "\"silu\"";
  RETORT_INPUT_CHECK(act == "\"silu\"", "'{}': \"hidden_act\" is {}; the Llama family's MLP is SwiGLU (\"silu\")",
                     file.path, act);
  RETORT_INPUT_CHECK(!file.get_bool("mlp_bias", false), "'{}': \"mlp_bias\" is true; retort's MLP has no biases",
                     file.path);
  RETORT_INPUT_CHECK(!file.get_bool("use_sliding_window", false),
                     "'{}': \"use_sliding_window\" is true; retort's attention is full causal attention", file.path);

  GptConfig c;
  c.family = type;
  c.vocab_size = file.get_int("vocab_size");
  c.n_embd = file.get_int("hidden_size");
  c.intermediate_size = file.get_int("intermediate_size");
  c.n_layer = file.get_int("num_hidden_layers");
  c.n_head = file.get_int("num_attention_heads");
  c.n_kv_head = file.get_int("num_key_value_heads", c.n_head);
  c.head_dim = file.get_int("head_dim", 0);
  c.block_size = file.get_int("max_position_embeddings");
  c.norm = "rmsnorm";
  c.bias = false;
  c.norm_eps = file.has("rms_norm_eps") ? file.get_double(file.json, "rms_norm_eps", "") : 1e-6;
  c.tie_weights = file.get_bool("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases and no output bias; Llama and Qwen3 put a bias on all four with attention_bias.
  const bool attention_bias = file.get_bool("attention_bias", false);
  c.qkv_bias = type == "qwen2" || attention_bias;
  c.out_bias = type != "qwen2" && attention_bias;
  c.qk_norm = type == "qwen3";
  c.rope = read_rope(file);
  c.validate();
  return c;
}

}  // namespace retort
