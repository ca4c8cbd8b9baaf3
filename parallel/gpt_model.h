#pragma once
// A GPT-style decoder: token + learned position embeddings, N pre-norm blocks of causal self-attention
// and a GELU MLP, a final norm and an LM head (optionally tied to the token embedding).
#include <memory>
#include <string>
#include <vector>

#include "core/nn/layers.h"

namespace retort {

struct GptConfig {
  int64_t vocab_size = 8192;
  int64_t block_size = 128;  // context length
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  int64_t mlp_ratio = 4;
  bool bias = true;
  bool tie_weights = true;
  std::string norm = "layernorm";  // layernorm | rmsnorm
  double norm_eps = 1e-5;
  double init_std = 0.02;

  void validate() const;  // InputError naming the first bad value
};

class GptBlock : public nn::Module {
 public:
  explicit GptBlock(const GptConfig& config);
  Tensor forward(const Tensor& x, DType compute_dtype) const;

 private:
  int64_t n_head_;
  std::shared_ptr<nn::Norm> ln_1_, ln_2_;
  std::shared_ptr<nn::Linear> qkv_, attn_proj_, fc_, mlp_proj_;
};

class GptModel : public nn::Module {
 public:
  explicit GptModel(const GptConfig& config);

  // GPT-2's initialisation: N(0, init_std) for weights, init_std / sqrt(2 n_layer) for the projections
  // that write into the residual stream, zero biases, unit norm weights. Deterministic in `seed`.
  void initialize(uint64_t seed);

  // ids i32 [B, T] -> logits [B, T, vocab] in compute_dtype (f32 or bf16; parameters stay f32).
  Tensor forward(const Tensor& ids, DType compute_dtype = DType::F32) const;

  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  std::shared_ptr<nn::Norm> ln_f_;
  std::shared_ptr<nn::Linear> lm_head_;  // absent when tied
};

}  // namespace retort
