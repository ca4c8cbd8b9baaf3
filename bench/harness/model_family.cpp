#include "bench/harness/model_family.h"

namespace retort::bench {

void add_family_options(CLI::App& app, GptConfig& config) {
  // The Llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases): --family llama with its sizes.
  app.add_option("--family", config.family, "gpt | llama | qwen2 | qwen3");
  app.add_option("--kv-heads", config.n_kv_head, "key/value heads (Llama family; 0: --heads)");
  app.add_option("--intermediate", config.intermediate_size, "SwiGLU width (Llama family)");
  app.add_option("--rope-theta", config.rope.theta, "RoPE base (Llama family)");
}

void apply_family_architecture(GptConfig& config) {
  if (!config.llama_family()) return;
  config.norm = "rmsnorm";
  config.bias = false;
  config.qkv_bias = config.family == "qwen2";
  config.qk_norm = config.family == "qwen3";
}

}  // namespace retort::bench
