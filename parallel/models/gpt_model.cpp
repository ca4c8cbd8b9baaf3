#include "parallel/models/gpt_model.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/tp/regions.h"
#include "parallel/tp/sharding.h"

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

void GptConfig::validate_for_tp(int tp) const {
  validate();
  tp::check_divides(n_head, tp, "model.n_head");
  tp::check_divides(mlp_ratio * n_embd, tp, "the MLP width (model.mlp_ratio x model.n_embd)");
  tp::check_divides(vocab_size, tp, "the vocabulary size (data.vocab_size)");
}

GptBlock::GptBlock(const GptConfig& c, const std::shared_ptr<Communicator>& group)
    : local_heads_(c.n_head / tp::group_size(group)) {
  const auto kind = nn::norm_kind_from_name(c.norm);
  const int64_t width = c.mlp_ratio * c.n_embd;
  ln_1_ = register_module("ln_1", std::make_shared<nn::Norm>(c.n_embd, kind, c.bias, c.norm_eps));
  // q | k | v are three blocks of the output: each rank takes its heads from all three.
  qkv_ = register_module("attn.qkv",
                         std::make_shared<tp::ColumnParallelLinear>(c.n_embd, 3 * c.n_embd, c.bias, group, false, 3));
  attn_proj_ = register_module("attn.proj", std::make_shared<tp::RowParallelLinear>(c.n_embd, c.n_embd, c.bias, group));
  ln_2_ = register_module("ln_2", std::make_shared<nn::Norm>(c.n_embd, kind, c.bias, c.norm_eps));
  fc_ = register_module("mlp.fc", std::make_shared<tp::ColumnParallelLinear>(c.n_embd, width, c.bias, group));
  mlp_proj_ = register_module("mlp.proj", std::make_shared<tp::RowParallelLinear>(width, c.n_embd, c.bias, group));
}

Tensor GptBlock::forward(const Tensor& x, DType compute_dtype) const {
  Tensor attn =
      ops::causal_self_attention(qkv_->forward(ln_1_->forward(x), compute_dtype), static_cast<int>(local_heads_));
  Tensor h = ops::add(x, attn_proj_->forward(attn, compute_dtype));
  Tensor mlp = mlp_proj_->forward(ops::gelu(fc_->forward(ln_2_->forward(h), compute_dtype)), compute_dtype);
  return ops::add(h, mlp);
}

Tensor GptBlock::forward_cached(const Tensor& x, generate::KvCache& cache, int64_t layer, DType compute_dtype) const {
  const Tensor qkv = qkv_->forward(ln_1_->forward(x), compute_dtype);
  const Tensor attn = ops::attention_with_kv_cache(qkv, cache.keys(layer), cache.values(layer),
                                                   cache.lengths_on_device(), static_cast<int>(local_heads_));
  Tensor h = ops::add(x, attn_proj_->forward(attn, compute_dtype));
  Tensor mlp = mlp_proj_->forward(ops::gelu(fc_->forward(ln_2_->forward(h), compute_dtype)), compute_dtype);
  return ops::add(h, mlp);
}

GptModel::GptModel(const GptConfig& config, std::shared_ptr<Communicator> tp_group)
    : config_(config), tp_group_(tp::is_distributed(tp_group) ? std::move(tp_group) : nullptr) {
  config_.validate_for_tp(tp::group_size(tp_group_));
  wte_ = register_module("wte",
                         std::make_shared<tp::VocabParallelEmbedding>(config_.vocab_size, config_.n_embd, tp_group_));
  wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(config_.block_size, config_.n_embd));
  for (int64_t i = 0; i < config_.n_layer; ++i)
    blocks_.push_back(register_module("blocks." + std::to_string(i), std::make_shared<GptBlock>(config_, tp_group_)));
  ln_f_ = register_module("ln_f", std::make_shared<nn::Norm>(config_.n_embd, nn::norm_kind_from_name(config_.norm),
                                                             config_.bias, config_.norm_eps));
  if (!config_.tie_weights)
    lm_head_ = register_module(
        "lm_head", std::make_shared<tp::ColumnParallelLinear>(config_.n_embd, config_.vocab_size, false, tp_group_));
  tp::mark_replicated(*this, tp_group_);
}

void GptModel::initialize(uint64_t seed) {
  const double residual_std = config_.init_std / std::sqrt(2.0 * config_.n_layer);
  const int tp_size = tp::group_size(tp_group_), tp_rank = tp::group_rank(tp_group_);
  for (auto& [name, param] : named_parameters()) {
    const Shape full = tp::full_shape(param.shape(), param.sharding(), tp_size);
    Tensor value;
    if (name.ends_with(".bias")) {
      value = Tensor::zeros(full);
    } else if (name.find("ln_") != std::string::npos) {
      value = Tensor::full(full, 1.0);
    } else {
      const bool residual = name.ends_with("attn.proj.weight") || name.ends_with("mlp.proj.weight");
      value = randn(full, residual ? residual_std : config_.init_std, seed, stream_id(name));
    }
    value = tp::shard_of(value, param.sharding(), tp_rank, tp_size);
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
  return tp::vocab_parallel_logits(x, lm_head_ ? lm_head_->weight() : wte_->weight(), tp_group_, compute_dtype);
}

Tensor GptModel::forward_cached(const Tensor& ids, const std::vector<int64_t>& valid, generate::KvCache& cache,
                                DType compute_dtype) const {
  NoGradGuard no_grad;
  RETORT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I32, "GptModel::forward_cached needs i32 ids [B, T], got {}",
               ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1);
  RETORT_CHECK(B == cache.batch() && static_cast<int64_t>(valid.size()) == B,
               "GptModel::forward_cached: ids {} with {} valid counts for a KV cache of {} sequences", ids.describe(),
               valid.size(), cache.batch());
  std::vector<int32_t> positions(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = cache.length(b), count = valid[static_cast<size_t>(b)];
    RETORT_INPUT_CHECK(count >= 0 && count <= T,
                       "GptModel::forward_cached: sequence {} has {} valid tokens in ids of {} positions per row", b,
                       count, T);
    RETORT_INPUT_CHECK(start + count <= cache.capacity(),
                       "sequence {} cannot take {} more tokens: it holds {} of the KV cache's {} positions (the "
                       "context is full; reset the cache or make it larger)",
                       b, count, start, cache.capacity());
    // Padding past the context reuses the last position's embedding; its results are never read.
    for (int64_t t = 0; t < T; ++t)
      positions[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(std::min(start + t, config_.block_size - 1));
  }
  const Tensor pos = Tensor::from_ints(positions, {B, T}, ids.device());
  Tensor x = ops::add(wte_->forward(ids), wpe_->forward(pos));
  x = nn::to_compute(x, compute_dtype);
  for (size_t layer = 0; layer < blocks_.size(); ++layer)
    x = blocks_[layer]->forward_cached(x, cache, static_cast<int64_t>(layer), compute_dtype);
  // Only each row's last real position is needed for the next token: the final norm and the LM head (the widest
  // product of the model) run on B rows instead of B x T.
  if (T > 1) {
    std::vector<Tensor> last;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t t = std::max<int64_t>(valid[static_cast<size_t>(b)] - 1, 0);
      last.push_back(narrow_copy(narrow_copy(x, 0, b, 1), 1, t, 1));
    }
    x = concat(last, 0);
  }
  x = ln_f_->forward(x);
  Tensor logits =
      tp::vocab_parallel_logits(x, lm_head_ ? lm_head_->weight() : wte_->weight(), tp_group_, compute_dtype);
  cache.advance(valid);
  Tensor rows = logits.view({B, logits.size(-1)});
  if (tp_group_) rows.set_sharding({1, 1, tp_group_});
  return rows;
}

}  // namespace retort
