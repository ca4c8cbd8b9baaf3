#include "parallel/gpt_model.h"

#include <cmath>

#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "core/util/error.h"

namespace retort {

void GptConfig::validate() const {
  RETORT_INPUT_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  RETORT_INPUT_CHECK(block_size > 0, "model.block_size must be positive, got {}", block_size);
  RETORT_INPUT_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  RETORT_INPUT_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  RETORT_INPUT_CHECK(n_embd > 0 && n_embd % n_head == 0,
                     "model.n_embd ({}) must be a positive multiple of model.n_head ({})", n_embd, n_head);
  RETORT_INPUT_CHECK(mlp_ratio > 0, "model.mlp_ratio must be positive, got {}", mlp_ratio);
  nn::norm_kind_from_name(norm);
}

GptBlock::GptBlock(const GptConfig& c) : n_head_(c.n_head) {
  const auto kind = nn::norm_kind_from_name(c.norm);
  ln_1_ = register_module("ln_1", std::make_shared<nn::Norm>(c.n_embd, kind, c.bias, c.norm_eps));
  qkv_ = register_module("attn.qkv", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd, c.bias));
  attn_proj_ = register_module("attn.proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd, c.bias));
  ln_2_ = register_module("ln_2", std::make_shared<nn::Norm>(c.n_embd, kind, c.bias, c.norm_eps));
  fc_ = register_module("mlp.fc", std::make_shared<nn::Linear>(c.n_embd, c.mlp_ratio * c.n_embd, c.bias));
  mlp_proj_ = register_module("mlp.proj", std::make_shared<nn::Linear>(c.mlp_ratio * c.n_embd, c.n_embd, c.bias));
}

Tensor GptBlock::forward(const Tensor& x, DType compute_dtype) const {
  Tensor attn = ops::causal_self_attention(qkv_->forward(ln_1_->forward(x), compute_dtype), static_cast<int>(n_head_));
  Tensor h = ops::add(x, attn_proj_->forward(attn, compute_dtype));
  Tensor mlp = mlp_proj_->forward(ops::gelu(fc_->forward(ln_2_->forward(h), compute_dtype)), compute_dtype);
  return ops::add(h, mlp);
}

GptModel::GptModel(const GptConfig& config) : config_(config) {
  config_.validate();
  wte_ = register_module("wte", std::make_shared<nn::Embedding>(config_.vocab_size, config_.n_embd));
  wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(config_.block_size, config_.n_embd));
  for (int64_t i = 0; i < config_.n_layer; ++i)
    blocks_.push_back(register_module("blocks." + std::to_string(i), std::make_shared<GptBlock>(config_)));
  ln_f_ = register_module("ln_f", std::make_shared<nn::Norm>(config_.n_embd, nn::norm_kind_from_name(config_.norm),
                                                             config_.bias, config_.norm_eps));
  if (!config_.tie_weights)
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(config_.n_embd, config_.vocab_size, false));
}

void GptModel::initialize(uint64_t seed) {
  const double residual_std = config_.init_std / std::sqrt(2.0 * config_.n_layer);
  for (auto& [name, param] : named_parameters()) {
    Tensor value;
    if (name.ends_with(".bias")) {
      value = Tensor::zeros(param.shape());
    } else if (name.find("ln_") != std::string::npos) {
      value = Tensor::full(param.shape(), 1.0);
    } else {
      const bool residual = name.ends_with("attn.proj.weight") || name.ends_with("mlp.proj.weight");
      value = randn(param.shape(), residual ? residual_std : config_.init_std, seed, stream_id(name));
    }
    param.copy_(value.to(param.dtype()).to(param.device()));
  }
}

Tensor GptModel::forward(const Tensor& ids, DType compute_dtype) const {
  RETORT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I32, "GptModel::forward needs i32 ids [B, T], got {}",
               ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1);
  RETORT_INPUT_CHECK(T <= config_.block_size, "sequence length {} exceeds the model's context (model.block_size = {})",
                     T, config_.block_size);
  std::vector<int32_t> positions(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) positions[i] = static_cast<int32_t>(i % T);
  Tensor pos = Tensor::from_ints(positions, {B, T}, ids.device());
  Tensor x = ops::add(wte_->forward(ids), wpe_->forward(pos));
  x = nn::to_compute(x, compute_dtype);
  for (const auto& block : blocks_) x = block->forward(x, compute_dtype);
  x = ln_f_->forward(x);
  if (lm_head_) return lm_head_->forward(x, compute_dtype);
  return ops::linear(x, nn::to_compute(wte_->weight(), compute_dtype), Tensor());
}

}  // namespace retort
