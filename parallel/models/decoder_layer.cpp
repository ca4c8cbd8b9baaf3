#include "parallel/models/decoder_layer.h"

#include <algorithm>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/decode_ops.h"
#include "core/ops/fusion.h"
#include "core/ops/ops.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "parallel/tp/regions.h"

namespace retort::models {
namespace {

// Features [start, start + length) of the last dim, differentiably: the gradient is zero elsewhere.
Tensor narrow_features(const Tensor& x, int64_t start, int64_t length) {
  const int dim = x.ndim() - 1;
  return autograd::record(narrow_copy(x, dim, start, length), "narrow_features", {x},
                          [shape = x.shape(), dim, start](const Tensor& g) {
                            Tensor grad = Tensor::zeros(shape, g.dtype(), g.device());
                            copy_into_narrow(grad, dim, start, g);
                            return std::vector<Tensor>{grad};
                          });
}

// RMSNorm in float32 whatever the compute dtype (as transformers does), back in x's dtype.
Tensor norm_in_f32(const nn::Norm& norm, const Tensor& x) {
  if (x.dtype() != DType::BF16) return norm.forward(x);
  return ops::cast(norm.forward(ops::cast(x, DType::F32)), DType::BF16);
}

// x + r and the RMSNorm of the sum in float32, as norm_in_f32 of ops::add(x, r), in one kernel each way when the
// fused kernels are on (the kernel reads the bf16 stream and computes in float32 already).
ops::ResidualNorm added_norm_in_f32(const nn::Norm& norm, const Tensor& x, const Tensor& r) {
  if (!ops::fused_kernels_enabled()) {
    const Tensor sum = ops::add(x, r);
    return {sum, norm_in_f32(norm, sum)};
  }
  if (x.dtype() != DType::BF16) return norm.forward_added(x, r);
  return ops::add_rms_norm(x, r, nn::to_compute(norm.weight(), DType::F32), norm.eps());
}

// The per-head norm of qwen3: x [B, T, heads * head_dim] normed over each head's head_dim, in float32. Each rank
// holds only some heads, so the weight (the same on every rank) enters through the copy region: its gradient is
// summed over the group, the full gradient on every rank.
Tensor norm_per_head(const nn::Norm& norm, const Tensor& x, int64_t heads, int64_t head_dim,
                     const std::shared_ptr<Communicator>& group) {
  const Tensor per_head = ops::reshape(x, {x.size(0), x.size(1), heads, head_dim});
  const bool low = x.dtype() == DType::BF16;
  const Tensor input = low ? ops::cast(per_head, DType::F32) : per_head;
  const Tensor weight = tp::copy_to_tp_region(nn::to_compute(norm.weight(), input.dtype()), group);
  const Tensor normed = ops::rms_norm(input, weight, norm.eps());
  return ops::reshape(low ? ops::cast(normed, DType::BF16) : normed, x.shape());
}

}  // namespace

DecoderLayer::DecoderLayer(const GptConfig& c, const std::shared_ptr<Communicator>& group)
    : group_(group), head_dim_(c.head_size()) {
  const int tp = tp::group_size(group);
  local_heads_ = c.n_head / tp;
  local_kv_heads_ = c.local_kv_heads(tp);
  const int64_t C = c.n_embd, D = head_dim_, kv_width = c.kv_heads() * D;
  const auto rms = nn::NormKind::RmsNorm;
  input_layernorm_ = register_module("input_layernorm", std::make_shared<nn::Norm>(C, rms, false, c.norm_eps));
  q_proj_ = register_module("self_attn.q_proj",
                            std::make_shared<tp::ColumnParallelLinear>(C, c.n_head * D, c.qkv_bias, group));
  if (c.kv_heads() % tp == 0) {
    k_proj_ =
        register_module("self_attn.k_proj", std::make_shared<tp::ColumnParallelLinear>(C, kv_width, c.qkv_bias, group));
    v_proj_ =
        register_module("self_attn.v_proj", std::make_shared<tp::ColumnParallelLinear>(C, kv_width, c.qkv_bias, group));
  } else {
    // tp ranks share each kv head: rank r's query heads read kv head r / (tp / n_kv_head).
    k_whole_ = register_module("self_attn.k_proj", std::make_shared<nn::Linear>(C, kv_width, c.qkv_bias));
    v_whole_ = register_module("self_attn.v_proj", std::make_shared<nn::Linear>(C, kv_width, c.qkv_bias));
    kv_start_ = (tp::group_rank(group) / (tp / c.kv_heads())) * D;
  }
  o_proj_ =
      register_module("self_attn.o_proj", std::make_shared<tp::RowParallelLinear>(c.n_head * D, C, c.out_bias, group));
  if (c.qk_norm) {
    q_norm_ = register_module("self_attn.q_norm", std::make_shared<nn::Norm>(D, rms, false, c.norm_eps));
    k_norm_ = register_module("self_attn.k_norm", std::make_shared<nn::Norm>(D, rms, false, c.norm_eps));
  }
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", std::make_shared<nn::Norm>(C, rms, false, c.norm_eps));
  const int64_t width = c.mlp_width();
  gate_proj_ = register_module("mlp.gate_proj", std::make_shared<tp::ColumnParallelLinear>(C, width, false, group));
  up_proj_ = register_module("mlp.up_proj", std::make_shared<tp::ColumnParallelLinear>(C, width, false, group));
  down_proj_ = register_module("mlp.down_proj", std::make_shared<tp::RowParallelLinear>(width, C, false, group));
}

Tensor DecoderLayer::project_kv(const std::shared_ptr<tp::ColumnParallelLinear>& sharded,
                                const std::shared_ptr<nn::Linear>& whole, const Tensor& x, DType compute_dtype) const {
  if (sharded) return sharded->forward(x, compute_dtype);
  // Every rank holds the same x and the same weights; the copy region sums the ranks' gradients of the whole
  // projection in backward, so each rank's weight gradient is the full one and x's gradient counts it once.
  const Tensor all_heads = tp::copy_to_tp_region(whole->forward(x, compute_dtype), group_);
  return narrow_features(all_heads, kv_start_, head_dim_);
}

DecoderLayer::Projected DecoderLayer::project(const Tensor& normed, const Tensor& positions, const Tensor& inv_freq,
                                              DType compute_dtype) const {
  Projected p;
  p.q = q_proj_->forward(normed, compute_dtype);
  p.k = project_kv(k_proj_, k_whole_, normed, compute_dtype);
  p.v = project_kv(v_proj_, v_whole_, normed, compute_dtype);
  return positioned(std::move(p), positions, inv_freq);
}

DecoderLayer::Projected DecoderLayer::positioned(Projected p, const Tensor& positions, const Tensor& inv_freq) const {
  if (q_norm_) {
    p.q = norm_per_head(*q_norm_, p.q, local_heads_, head_dim_, group_);
    p.k = norm_per_head(*k_norm_, p.k, local_kv_heads_, head_dim_, group_);
  }
  p.q = ops::rotary_embedding(p.q, positions, inv_freq, head_dim_);
  p.k = ops::rotary_embedding(p.k, positions, inv_freq, head_dim_);
  return p;
}

Tensor DecoderLayer::mlp(const Tensor& normed, DType compute_dtype) const {
  return down_proj_->forward(
      ops::swiglu(gate_proj_->forward(normed, compute_dtype), up_proj_->forward(normed, compute_dtype)), compute_dtype);
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                             DType compute_dtype) const {
  const ResidualStream out = forward_stream({x, Tensor()}, positions, inv_freq, compute_dtype);
  return ops::add(out.x, out.pending);
}

template <typename Attend>
ResidualStream DecoderLayer::around_attention(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                              DType compute_dtype, const Attend& attend) const {
  const ops::ResidualNorm first = in.pending.defined() ? added_norm_in_f32(*input_layernorm_, in.x, in.pending)
                                                       : ops::ResidualNorm{in.x, norm_in_f32(*input_layernorm_, in.x)};
  const Tensor attn = attend(project(first.normed, positions, inv_freq, compute_dtype));
  const ops::ResidualNorm second =
      added_norm_in_f32(*post_attention_layernorm_, first.sum, o_proj_->forward(attn, compute_dtype));
  return {second.sum, mlp(second.normed, compute_dtype)};
}

ResidualStream DecoderLayer::forward_stream(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                            DType compute_dtype) const {
  return around_attention(in, positions, inv_freq, compute_dtype, [&](const Projected& p) {
    return ops::causal_attention(p.q, p.k, p.v, static_cast<int>(local_heads_), static_cast<int>(local_kv_heads_));
  });
}

ResidualStream DecoderLayer::forward_cached(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                            generate::KvCache& cache, int64_t layer, const Tensor& starts,
                                            DType compute_dtype) const {
  // The attention output and the MLP's down projection read wider rows than x: they must fit one launch too.
  const int64_t widest = std::max(o_proj_->weight().size(1), down_proj_->weight().size(1));
  if (!tp::is_distributed(group_) && k_proj_ && v_proj_ && ops::decode_fusion_applies(in.x, compute_dtype, widest))
    return forward_cached_fused(in, positions, inv_freq, cache, layer, starts, compute_dtype);
  return around_attention(in, positions, inv_freq, compute_dtype, [&](const Projected& p) {
    return ops::attention_with_kv_cache(p.q, p.k, p.v, cache.keys(layer), cache.values(layer), starts,
                                        static_cast<int>(local_heads_), static_cast<int>(local_kv_heads_));
  });
}

ResidualStream DecoderLayer::forward_cached_fused(const ResidualStream& in, const Tensor& positions,
                                                  const Tensor& inv_freq, generate::KvCache& cache, int64_t layer,
                                                  const Tensor& starts, DType compute_dtype) const {
  using kernels::LinearEpilogue;
  const auto weight = [&](const auto& linear) { return nn::to_compute(linear->weight(), compute_dtype); };
  const auto bias = [&](const auto& linear) { return nn::to_compute(linear->bias(), compute_dtype); };
  const Tensor x = in.pending.defined() ? ops::add(in.x, in.pending) : in.x;
  // The norms in float32 whatever the compute dtype, as norm_in_f32.
  const kernels::RowNorm first = input_layernorm_->as_prologue(DType::F32);
  Projected p;
  p.q = ops::small_m_linear(x, first, weight(q_proj_), bias(q_proj_));
  p.k = ops::small_m_linear(x, first, weight(k_proj_), bias(k_proj_));
  p.v = ops::small_m_linear(x, first, weight(v_proj_), bias(v_proj_));
  p = positioned(std::move(p), positions, inv_freq);
  const Tensor attn = ops::attention_with_kv_cache(p.q, p.k, p.v, cache.keys(layer), cache.values(layer), starts,
                                                   static_cast<int>(local_heads_), static_cast<int>(local_kv_heads_));
  const Tensor mid = ops::small_m_linear(attn, {}, weight(o_proj_), bias(o_proj_), LinearEpilogue::Residual, x);
  const Tensor gated = ops::small_m_linear(mid, post_attention_layernorm_->as_prologue(DType::F32), weight(gate_proj_),
                                           Tensor(), LinearEpilogue::SwiGlu, Tensor(), weight(up_proj_));
  return {ops::small_m_linear(gated, {}, weight(down_proj_), Tensor(), LinearEpilogue::Residual, mid), Tensor()};
}

}  // namespace retort::models
