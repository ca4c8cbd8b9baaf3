#include "parallel/models/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd/grad_mode.h"
#include "core/ops/decode_ops.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/decoder_layer.h"
#include "parallel/tp/regions.h"
#include "parallel/tp/sharding.h"

namespace retort {

void GptConfig::validate() const {
  RETORT_INPUT_CHECK(family == "gpt" || family == "llama" || family == "qwen2" || family == "qwen3",
                     "model.family '{}' is not a model family retort builds: choose gpt, llama, qwen2 or qwen3",
                     family);
  RETORT_INPUT_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  RETORT_INPUT_CHECK(block_size > 0, "model.block_size must be positive, got {}", block_size);
  RETORT_INPUT_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  RETORT_INPUT_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  RETORT_INPUT_CHECK(mlp_ratio > 0, "model.mlp_ratio must be positive, got {}", mlp_ratio);
  if (!llama_family()) {
    RETORT_INPUT_CHECK(n_embd > 0 && n_embd % n_head == 0,
                       "model.n_embd ({}) must be a positive multiple of model.n_head ({})", n_embd, n_head);
    nn::norm_kind_from_name(norm);
    return;
  }
  RETORT_INPUT_CHECK(n_embd > 0, "model.n_embd must be positive, got {}", n_embd);
  RETORT_INPUT_CHECK(head_dim > 0 || n_embd % n_head == 0,
                     "model.n_embd ({}) must be a multiple of model.n_head ({}), or set model.head_dim", n_embd,
                     n_head);
  RETORT_INPUT_CHECK(head_size() % 2 == 0, "rotary embeddings need an even head_dim, got {}", head_size());
  RETORT_INPUT_CHECK(n_kv_head >= 0 && n_head % kv_heads() == 0,
                     "model.n_head ({}) must be a multiple of model.n_kv_head ({}): each key/value head serves a "
                     "whole group of query heads",
                     n_head, kv_heads());
  RETORT_INPUT_CHECK(intermediate_size >= 0,
                     "model.intermediate_size must be positive (or 0: mlp_ratio x n_embd), "
                     "got {}",
                     intermediate_size);
  rope.validate();
}

void GptConfig::validate_for_tp(int tp) const {
  validate();
  tp::check_divides(n_head, tp, "model.n_head");
  tp::check_divides(
      mlp_width(), tp,
      llama_family() ? "the MLP width (model.intermediate_size)" : "the MLP width (model.mlp_ratio x model.n_embd)");
  if (llama_family()) {
    RETORT_INPUT_CHECK(kv_heads() % tp == 0 || tp % kv_heads() == 0,
                       "the {} key/value heads (model.n_kv_head) do not split over parallel.tp = {} ranks: choose a tp "
                       "that divides {} or is a multiple of it",
                       kv_heads(), tp, kv_heads());
  }
}

GptBlock::GptBlock(const GptConfig& c, const std::shared_ptr<Communicator>& group)
    : local_heads_(c.n_head / tp::group_size(group)), distributed_(tp::is_distributed(group)) {
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
  const ResidualStream out = forward_stream({x, Tensor()}, compute_dtype);
  return ops::add(out.x, out.pending);
}

template <typename Attend>
ResidualStream GptBlock::around_attention(const ResidualStream& in, DType compute_dtype, const Attend& attend) const {
  const ops::ResidualNorm first =
      in.pending.defined() ? ln_1_->forward_added(in.x, in.pending) : ops::ResidualNorm{in.x, ln_1_->forward(in.x)};
  const Tensor attn = attend(qkv_->forward(first.normed, compute_dtype));
  const ops::ResidualNorm second = ln_2_->forward_added(first.sum, attn_proj_->forward(attn, compute_dtype));
  const Tensor mlp = mlp_proj_->forward(fc_->forward_gelu(second.normed, compute_dtype), compute_dtype);
  return {second.sum, mlp};
}

ResidualStream GptBlock::forward_stream(const ResidualStream& in, DType compute_dtype) const {
  return around_attention(in, compute_dtype, [&](const Tensor& qkv) {
    return ops::causal_self_attention(qkv, static_cast<int>(local_heads_));
  });
}

ResidualStream GptBlock::forward_cached(const ResidualStream& in, generate::KvCache& cache, int64_t layer,
                                        const Tensor& starts, DType compute_dtype) const {
  // The MLP's projection reads rows 4x wider than x: they must fit one launch too.
  if (!distributed_ && ops::decode_fusion_applies(in.x, compute_dtype, mlp_proj_->weight().size(1)))
    return forward_cached_fused(in, cache, layer, starts, compute_dtype);
  if (!distributed_ && ops::decode_partial_products_apply(in.x, compute_dtype))
    return forward_cached_partials(in, cache, layer, starts, compute_dtype);
  RETORT_CHECK(!in.pending_partials.partials.defined(),
               "GptBlock::forward_cached: a pending partial product reached a block that does not take partials");
  return around_attention(in, compute_dtype, [&](const Tensor& qkv) {
    return ops::attention_with_kv_cache(qkv, cache.keys(layer), cache.values(layer), starts,
                                        static_cast<int>(local_heads_));
  });
}

namespace {

// A linear layer's weight and bias in the compute dtype, for the decode kernels that take them directly.
template <typename Linear>
std::pair<Tensor, Tensor> compute_weights(const Linear& linear, DType compute_dtype) {
  return {nn::to_compute(linear->weight(), compute_dtype), nn::to_compute(linear->bias(), compute_dtype)};
}

}  // namespace

ResidualStream GptBlock::forward_cached_fused(const ResidualStream& in, generate::KvCache& cache, int64_t layer,
                                              const Tensor& starts, DType compute_dtype) const {
  using kernels::LinearEpilogue;
  const Tensor x = in.pending.defined() ? ops::add(in.x, in.pending) : in.x;
  const auto [qkv_w, qkv_b] = compute_weights(qkv_, compute_dtype);
  const Tensor qkv = ops::small_m_linear(x, ln_1_->as_prologue(x.dtype()), qkv_w, qkv_b);
  const Tensor attn =
      ops::attention_with_kv_cache(qkv, cache.keys(layer), cache.values(layer), starts, static_cast<int>(local_heads_));
  const auto [proj_w, proj_b] = compute_weights(attn_proj_, compute_dtype);
  const Tensor mid = ops::small_m_linear(attn, {}, proj_w, proj_b, LinearEpilogue::Residual, x);
  const auto [fc_w, fc_b] = compute_weights(fc_, compute_dtype);
  const Tensor hidden = ops::small_m_linear(mid, ln_2_->as_prologue(mid.dtype()), fc_w, fc_b, LinearEpilogue::Gelu);
  const auto [out_w, out_b] = compute_weights(mlp_proj_, compute_dtype);
  return {ops::small_m_linear(hidden, {}, out_w, out_b, LinearEpilogue::Residual, mid), Tensor()};
}

ResidualStream GptBlock::forward_cached_partials(const ResidualStream& in, generate::KvCache& cache, int64_t layer,
                                                 const Tensor& starts, DType compute_dtype) const {
  const ops::ResidualNorm first =
      in.pending_partials.partials.defined()
          ? ops::add_partials_norm(in.x, in.pending_partials, ln_1_->as_prologue(in.x.dtype()))
      : in.pending.defined() ? ln_1_->forward_added(in.x, in.pending)
                             : ops::ResidualNorm{in.x, ln_1_->forward(in.x)};
  const Tensor attn = ops::attention_with_kv_cache(qkv_->forward(first.normed, compute_dtype), cache.keys(layer),
                                                   cache.values(layer), starts, static_cast<int>(local_heads_));
  const auto [proj_w, proj_b] = compute_weights(attn_proj_, compute_dtype);
  const ops::ResidualNorm second = ops::add_partials_norm(first.sum, ops::linear_partials(attn, proj_w, proj_b),
                                                          ln_2_->as_prologue(first.sum.dtype()));
  const Tensor hidden = fc_->forward_gelu(second.normed, compute_dtype);
  const auto [out_w, out_b] = compute_weights(mlp_proj_, compute_dtype);
  return {second.sum, Tensor(), ops::linear_partials(hidden, out_w, out_b)};
}

bool GptBlock::takes_decode_layers() const {
  return !distributed_ && ln_1_->kind() == nn::NormKind::LayerNorm && ln_2_->kind() == nn::NormKind::LayerNorm &&
         ln_1_->eps() == ln_2_->eps();
}

kernels::GptDecodeLayer GptBlock::decode_layer(generate::KvCache& cache, int64_t layer, DType compute_dtype) const {
  const auto compute = [&](const Tensor& t) { return t.defined() ? nn::to_compute(t, compute_dtype) : Tensor(); };
  const kernels::RowNorm first = ln_1_->as_prologue(compute_dtype), second = ln_2_->as_prologue(compute_dtype);
  return {qkv_fold_.get(first.weight, first.bias, compute(qkv_->weight()), compute(qkv_->bias())),
          compute(attn_proj_->weight()),
          compute(attn_proj_->bias()),
          fc_fold_.get(second.weight, second.bias, compute(fc_->weight()), compute(fc_->bias())),
          compute(mlp_proj_->weight()),
          compute(mlp_proj_->bias()),
          cache.keys(layer),
          cache.values(layer)};
}

GptModel::GptModel(const GptConfig& config, std::shared_ptr<Communicator> tp_group)
    : config_(config), tp_group_(tp::is_distributed(tp_group) ? std::move(tp_group) : nullptr) {
  const int tp = tp::group_size(tp_group_);
  config_.validate_for_tp(tp);
  const int64_t vocab = config_.padded_vocab(tp), C = config_.n_embd;
  const bool llama = config_.llama_family();
  const std::string prefix = llama ? "model." : "";
  wte_ = register_module(llama ? "model.embed_tokens" : "wte",
                         std::make_shared<tp::VocabParallelEmbedding>(vocab, C, tp_group_));
  if (!llama) wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(config_.block_size, C));
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    if (llama)
      layers_.push_back(register_module("model.layers." + std::to_string(i),
                                        std::make_shared<models::DecoderLayer>(config_, tp_group_)));
    else
      blocks_.push_back(register_module("blocks." + std::to_string(i), std::make_shared<GptBlock>(config_, tp_group_)));
  }
  if (llama)
    ln_f_ =
        register_module("model.norm", std::make_shared<nn::Norm>(C, nn::NormKind::RmsNorm, false, config_.norm_eps));
  else
    ln_f_ = register_module(
        "ln_f", std::make_shared<nn::Norm>(C, nn::norm_kind_from_name(config_.norm), config_.bias, config_.norm_eps));
  if (!config_.tie_weights)
    lm_head_ = register_module("lm_head", std::make_shared<tp::ColumnParallelLinear>(C, vocab, false, tp_group_));
  tp::mark_replicated(*this, tp_group_);
  if (vocab != config_.vocab_size) {
    // This rank's ids [start, start + vocab / tp): those at or past vocab_size are padding.
    const int64_t local = vocab / tp, start = tp::group_rank(tp_group_) * local;
    std::vector<float> mask(static_cast<size_t>(local), 0.0f);
    for (int64_t i = 0; i < local; ++i)
      if (start + i >= config_.vocab_size) mask[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
    vocab_mask_ = Tensor::from_floats(mask, {local});
  }
}

int64_t GptModel::local_kv_heads() const {
  const int tp = tp::group_size(tp_group_);
  return config_.llama_family() ? config_.local_kv_heads(tp) : config_.n_head / tp;
}

void GptModel::initialize(uint64_t seed) {
  const double residual_std = config_.init_std / std::sqrt(2.0 * config_.n_layer);
  const int tp_size = tp::group_size(tp_group_), tp_rank = tp::group_rank(tp_group_);
  const int64_t padded = config_.padded_vocab(tp_size);
  for (auto& [name, param] : named_parameters()) {
    const Shape full = tp::full_shape(param.shape(), param.sharding(), tp_size);
    // The vocabulary tables are drawn at their real size, then padded with zero rows: the same real rows at every tp.
    const bool padded_rows = padded != config_.vocab_size && param.ndim() == 2 && full[0] == padded &&
                             (name == "wte.weight" || name == "model.embed_tokens.weight" || name == "lm_head.weight");
    Shape drawn = full;
    if (padded_rows) drawn[0] = config_.vocab_size;
    Tensor value;
    if (name.ends_with(".bias")) {
      value = Tensor::zeros(drawn);
    } else if (name.find("ln_") != std::string::npos || name.find("norm") != std::string::npos) {
      value = Tensor::full(drawn, 1.0);
    } else {
      const bool residual = name.ends_with("attn.proj.weight") || name.ends_with("mlp.proj.weight") ||
                            name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
      value = randn(drawn, residual ? residual_std : config_.init_std, seed, stream_id(name));
    }
    if (padded_rows) value = concat({value, Tensor::zeros({padded - config_.vocab_size, full[1]})}, 0);
    value = tp::shard_of(value, param.sharding(), tp_rank, tp_size);
    param.copy_(value.to(param.dtype()).to(param.device()));
  }
}

const Tensor& GptModel::device_constant(const std::string& key, Device device,
                                        const std::function<Tensor()>& make) const {
  const std::lock_guard lock(constants_mutex_);
  auto [it, inserted] = constants_.try_emplace(key + "@" + device.str());
  if (inserted) it->second = make();
  return it->second;
}

Tensor GptModel::rope_frequencies(Device device) const {
  if (!config_.llama_family()) return Tensor();
  return device_constant("rope_inv_freq", device, [&] {
    const std::vector<float> inv_freq = rope_inv_freq(config_.rope, config_.head_size());
    return Tensor::from_floats(inv_freq, {static_cast<int64_t>(inv_freq.size())}, DType::F32, device);
  });
}

Tensor GptModel::embed(const Tensor& ids, const Tensor& positions, DType compute_dtype) const {
  Tensor x = wte_->forward(ids);
  if (wpe_) x = ops::add(x, wpe_->forward(positions));
  return nn::to_compute(x, compute_dtype);
}

Tensor GptModel::decode_embed(const Tensor& ids, const Tensor& positions, DType compute_dtype) const {
  if (tp_group_ || !ops::decode_fusion_allows(ids.device(), compute_dtype)) return embed(ids, positions, compute_dtype);
  return ops::embedding_sum(wte_->weight(), ids, wpe_ ? wpe_->weight() : Tensor(), wpe_ ? positions : Tensor(),
                            compute_dtype);
}

Tensor GptModel::head(const Tensor& x, DType compute_dtype) const {
  return head_of_normed(ln_f_->forward(x), compute_dtype);
}

Tensor GptModel::head_of_normed(const Tensor& x, DType compute_dtype) const {
  return masked(tp::vocab_parallel_logits(x, lm_head_ ? lm_head_->weight() : wte_->weight(), tp_group_, compute_dtype));
}

Tensor GptModel::decode_head(const Tensor& x, DType compute_dtype) const {
  const Tensor& master = lm_head_ ? lm_head_->weight() : wte_->weight();
  if (tp_group_) return head(x, compute_dtype);
  if (!ops::decode_fusion_applies(x, compute_dtype)) {
    // A vocabulary that is not a multiple of 8 (GPT-2's 50,257 ids) in 16 bits on the GPU: the product against the
    // head's rows padded once with zeros (ops::PaddedRowsCache), its first vocab_size logits kept.
    if (!x.device().is_cuda() || dtype_size(compute_dtype) != 2 || config_.vocab_size % 8 == 0)
      return head(x, compute_dtype);
    const Tensor logits = ops::linear(nn::to_compute(ln_f_->forward(x), compute_dtype),
                                      head_rows_.get(nn::to_compute(master, compute_dtype)), Tensor());
    return narrow_copy(logits, -1, 0, config_.vocab_size);
  }
  return masked(ops::small_m_linear(x, ln_f_->as_prologue(x.dtype()), nn::to_compute(master, compute_dtype), Tensor()));
}

Tensor GptModel::masked(const Tensor& logits) const {
  if (!vocab_mask_.defined()) return logits;
  // The losses, the vocab top-k and the sampler read only the real ids (full_extent, parallel/tp/vocab_shard.h);
  // the -inf keeps every other reader of the logits (an argmax, an export of logits) off the padding too.
  ShardingSpec spec = logits.sharding();
  spec.full_extent = config_.vocab_size;
  const Tensor& mask = device_constant("vocab_mask", logits.device(), [&] { return vocab_mask_.to(logits.device()); });
  Tensor masked = ops::add_bias(logits, nn::to_compute(mask, logits.dtype()));
  masked.set_sharding(spec);
  return masked;
}

Tensor GptModel::forward(const Tensor& ids, DType compute_dtype) const {
  RETORT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I32, "GptModel::forward needs i32 ids [B, T], got {}",
               ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1);
  RETORT_INPUT_CHECK(T <= config_.block_size, "sequence length {} exceeds the model's context (model.block_size = {})",
                     T, config_.block_size);
  const Tensor& pos = device_constant(fmt::format("positions {}x{}", B, T), ids.device(), [&] {
    std::vector<int32_t> positions(static_cast<size_t>(B * T));
    for (int64_t i = 0; i < B * T; ++i) positions[i] = static_cast<int32_t>(i % T);
    return Tensor::from_ints(positions, {B, T}, ids.device());
  });
  // Each block leaves its last output pending; the next norm (the final one after the last block) adds it.
  ResidualStream stream{embed(ids, pos, compute_dtype), Tensor()};
  for (const auto& block : blocks_) stream = block->forward_stream(stream, compute_dtype);
  if (!layers_.empty()) {
    const Tensor inv_freq = rope_frequencies(ids.device());
    for (const auto& layer : layers_) stream = layer->forward_stream(stream, pos, inv_freq, compute_dtype);
  }
  if (!stream.pending.defined()) return head(stream.x, compute_dtype);
  return head_of_normed(ln_f_->forward_added(stream.x, stream.pending).normed, compute_dtype);
}

Tensor GptModel::cached_layers(Tensor x, const Tensor& positions, const Tensor& inv_freq, const Tensor& starts,
                               generate::KvCache& cache, DType compute_dtype) const {
  // One new position a row through GPT blocks that all take it: every block in one launch (gpt_decode_layers).
  if (!blocks_.empty() && layers_.empty() && !tp_group_ && config_.mlp_width() == 4 * config_.n_embd &&
      ops::gpt_decode_layers_applies(x, compute_dtype, config_.n_head) &&
      std::all_of(blocks_.begin(), blocks_.end(), [](const auto& block) { return block->takes_decode_layers(); })) {
    std::vector<kernels::GptDecodeLayer> layers;
    for (size_t layer = 0; layer < blocks_.size(); ++layer)
      layers.push_back(blocks_[layer]->decode_layer(cache, static_cast<int64_t>(layer), compute_dtype));
    return ops::gpt_decode_layers(x, layers, starts, static_cast<int>(config_.n_head),
                                  static_cast<float>(config_.norm_eps));
  }
  // The residual stream as in forward: each block's last addition is done by the next block's norm.
  ResidualStream stream{std::move(x), Tensor()};
  for (size_t layer = 0; layer < blocks_.size(); ++layer)
    stream = blocks_[layer]->forward_cached(stream, cache, static_cast<int64_t>(layer), starts, compute_dtype);
  for (size_t layer = 0; layer < layers_.size(); ++layer)
    stream = layers_[layer]->forward_cached(stream, positions, inv_freq, cache, static_cast<int64_t>(layer), starts,
                                            compute_dtype);
  if (stream.pending_partials.partials.defined())
    return ops::add_partials_norm(stream.x, stream.pending_partials, {}).sum;
  return stream.pending.defined() ? ops::add(stream.x, stream.pending) : stream.x;
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
  Tensor x = cached_layers(decode_embed(ids, pos, compute_dtype), pos, rope_frequencies(ids.device()),
                           cache.lengths_on_device(), cache, compute_dtype);
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
  Tensor logits = decode_head(x, compute_dtype);
  cache.advance(valid);
  Tensor rows = logits.view({B, logits.size(-1)});
  if (tp_group_) rows.set_sharding({1, 1, tp_group_, logits.sharding().full_extent});
  return rows;
}

Tensor GptModel::decode_step(const Tensor& ids, const Tensor& positions, const Tensor& inv_freq,
                             generate::KvCache& cache, DType compute_dtype) const {
  NoGradGuard no_grad;
  const int64_t B = cache.batch();
  RETORT_CHECK(ids.ndim() == 2 && ids.dtype() == DType::I32 && ids.size(0) == B && ids.size(1) == 1,
               "GptModel::decode_step needs i32 ids [{}, 1] (one token per sequence of the cache), got {}", B,
               ids.describe());
  RETORT_CHECK(positions.dtype() == DType::I32 && positions.shape() == ids.shape(),
               "GptModel::decode_step needs i32 positions shaped like the ids {}, got {}", ids.describe(),
               positions.describe());
  RETORT_CHECK(!config_.llama_family() || inv_freq.defined(),
               "GptModel::decode_step: the {} family needs inv_freq (rope_frequencies)", config_.family);
  // The same ops as forward_cached with T_new = 1, in the same order: the logits agree bit for bit.
  Tensor x = cached_layers(decode_embed(ids, positions, compute_dtype), positions, inv_freq, positions.view({B}), cache,
                           compute_dtype);
  Tensor logits = decode_head(x, compute_dtype);
  Tensor rows = logits.view({B, logits.size(-1)});
  if (tp_group_) rows.set_sharding({1, 1, tp_group_, logits.sharding().full_extent});
  return rows;
}

namespace {

// Whether the forward casts parameter `name` to the compute dtype on every use (and so may hold it in that dtype):
// the embedding tables are gathered in float32 and cast after the sum of token and position rows, and the Llama
// family's layer norms (and qwen3's per-head q/k norms) run in float32; everything else meets compute-dtype inputs.
bool consumed_in_compute_dtype(const std::string& name, bool llama) {
  if (name == "wte.weight" || name == "wpe.weight" || name == "model.embed_tokens.weight") return false;
  if (!llama) return true;
  const auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return !(ends_with("layernorm.weight") || ends_with("q_norm.weight") || ends_with("k_norm.weight"));
}

}  // namespace

std::shared_ptr<GptModel> GptModel::inference_copy(DType compute_dtype) const {
  if (compute_dtype == DType::F32) return nullptr;
  GptConfig untied = config_;
  untied.tie_weights = false;  // the head gets its own compute-dtype copy; the lookup keeps the float32 rows
  auto copy = std::make_shared<GptModel>(untied, tp_group_);
  const nn::NamedTensors source = named_parameters();
  const auto find = [&](const std::string& name) -> const Tensor& {
    for (const auto& [n, t] : source)
      if (n == name) return t;
    throw Error(fmt::format("GptModel::inference_copy: no parameter {} in the model", name));
  };
  const bool llama = config_.llama_family();
  const std::string token_table = llama ? "model.embed_tokens.weight" : "wte.weight";
  for (auto& [name, param] : copy->named_parameters()) {
    const Tensor& from = config_.tie_weights && name == "lm_head.weight" ? find(token_table) : find(name);
    // The same cast the forward applies on each use (nn::to_compute), once; the other tensors are shared.
    const Tensor value = consumed_in_compute_dtype(name, llama) ? from.to(compute_dtype) : from;
    param.impl()->storage = value.impl()->storage;
    param.impl()->offset_bytes = value.impl()->offset_bytes;
    param.impl()->dtype = value.dtype();
    param.set_requires_grad(false);
  }
  return copy;
}

}  // namespace retort
