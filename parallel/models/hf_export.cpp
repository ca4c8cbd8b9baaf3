#include "parallel/models/hf_export.h"

#include <fstream>
#include <map>

#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "parallel/tp/layers.h"

namespace retort {

nlohmann::json hf_config_json(const GptConfig& c) {
  RETORT_INPUT_CHECK(c.llama_family(),
                     "a model of family '{}' has no Hugging Face export: retort exports the llama, qwen2 and qwen3 "
                     "families (model.family)",
                     c.family);
  static const std::map<std::string, std::string> kArchitectures = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  // Qwen2 always has q/k/v biases and no output bias, so its config has no attention_bias; Llama and Qwen3 put one
  // bias flag on all four projections.
  RETORT_INPUT_CHECK(c.family == "qwen2" ? (c.qkv_bias && !c.out_bias) : c.qkv_bias == c.out_bias,
                     "a {} model with q/k/v biases {} and an output bias {} cannot be written as a Hugging Face config",
                     c.family, c.qkv_bias, c.out_bias);
  RETORT_INPUT_CHECK(c.qk_norm == (c.family == "qwen3"),
                     "a {} model {} q/k norm cannot be written as a Hugging Face "
                     "config",
                     c.family, c.qk_norm ? "with" : "without");
  nlohmann::json rope = {{"rope_type", c.rope.type}, {"rope_theta", c.rope.theta}};
  if (c.rope.type == "llama3") {
    rope["factor"] = c.rope.factor;
    rope["low_freq_factor"] = c.rope.low_freq_factor;
    rope["high_freq_factor"] = c.rope.high_freq_factor;
    rope["original_max_position_embeddings"] = c.rope.original_max_position;
  }
  nlohmann::json json = {
      {"architectures", {kArchitectures.at(c.family)}},
      {"model_type", c.family},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.mlp_width()},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.kv_heads()},
      {"head_dim", c.head_size()},
      {"max_position_embeddings", c.block_size},
      {"rms_norm_eps", c.norm_eps},
      {"tie_word_embeddings", c.tie_weights},
      {"hidden_act", "silu"},
      {"rope_parameters", rope},
      {"dtype", "float32"},
      {"use_cache", true},
  };
  if (c.family != "qwen2") json["attention_bias"] = c.qkv_bias;
  if (c.family == "llama") json["mlp_bias"] = false;
  if (c.family != "llama") json["use_sliding_window"] = false;
  return json;
}

size_t save_hf_folder(const GptModel& model, const std::filesystem::path& folder) {
  RETORT_INPUT_CHECK(tp::group_size(model.tp_group()) == 1,
                     "a Hugging Face folder is written from a dense model (tp 1); load the run without tp");
  const GptConfig& config = model.config();
  const nlohmann::json json = hf_config_json(config);
  std::filesystem::create_directories(folder);
  NamedTensors tensors;
  for (const auto& [name, param] : model.named_parameters()) {
    Tensor value = param.device().is_cpu() ? param : param.to(Device::cpu());
    if (value.dtype() != DType::F32) value = value.to(DType::F32);
    tensors.emplace_back(name, value);
  }
  save_safetensors(folder / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(folder / "config.json", [&](std::ostream& out) { out << json.dump(2) << "\n"; });
  return tensors.size();
}

}  // namespace retort
