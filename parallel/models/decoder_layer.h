#pragma once
// One layer of the Llama family (llama, qwen2, qwen3): pre-norm grouped-query self-attention with rotary positions
// and a SwiGLU MLP, each added to the residual stream. Its parameters carry the Hugging Face names relative to the
// layer (input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
// mlp.{gate,up,down}_proj), so a checkpoint tensor maps to a parameter by name.
// Tensor parallel: q, gate and up are column-parallel, o and down row-parallel; k and v are column-parallel when the
// key/value heads divide by tp, and otherwise (tp a multiple of them) computed whole on every rank, which keeps the
// head its query heads read and sums the gradients over the group.
#include <memory>

#include "core/nn/layers.h"
#include "parallel/tp/layers.h"

namespace retort {
struct GptConfig;
struct ResidualStream;
namespace generate {
class KvCache;
}
}  // namespace retort

namespace retort::models {

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const GptConfig& config, const std::shared_ptr<Communicator>& tp_group);

  // x [B, T, C]; positions i32 [B, T] and inv_freq f32 [head_dim / 2] on x's device (the rotation's inputs).
  Tensor forward(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, DType compute_dtype) const;
  // The layer on a residual stream with a pending addition (gpt_model.h): returns {x + attention part, the MLP
  // output still pending}, each addition done by the norm after it in the same kernel.
  ResidualStream forward_stream(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                DType compute_dtype) const;
  // The same over new positions only: writes their keys and values into layer `layer` of the cache and attends
  // each row's cached keys (no tape).
  // starts: i32 [B] on the stream's device, where each row's new positions begin (the cache lengths).
  ResidualStream forward_cached(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                generate::KvCache& cache, int64_t layer, const Tensor& starts,
                                DType compute_dtype) const;

 private:
  struct Projected {
    Tensor q, k, v;
  };
  // q, k and v of this rank's heads from the normed input, q and k normed (qwen3) and rotated.
  Projected project(const Tensor& normed, const Tensor& positions, const Tensor& inv_freq, DType compute_dtype) const;
  // The projections q, k, v with q and k normed (qwen3) and rotated.
  Projected positioned(Projected p, const Tensor& positions, const Tensor& inv_freq) const;
  // forward_cached over few rows with fused products (ops::decode_fusion_applies): the input RMSNorm inside each of
  // the q, k and v products, the output projection + the residual add, the post-attention RMSNorm + gate and up +
  // SwiGLU in one product, down + the residual add. Returns the stream with nothing pending.
  ResidualStream forward_cached_fused(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                      generate::KvCache& cache, int64_t layer, const Tensor& starts,
                                      DType compute_dtype) const;
  // The layer around an attention that maps the projected q, k, v to [B, T, local heads * head_dim].
  template <typename Attend>
  ResidualStream around_attention(const ResidualStream& in, const Tensor& positions, const Tensor& inv_freq,
                                  DType compute_dtype, const Attend& attend) const;
  Tensor project_kv(const std::shared_ptr<tp::ColumnParallelLinear>& sharded, const std::shared_ptr<nn::Linear>& whole,
                    const Tensor& x, DType compute_dtype) const;
  // down(silu(gate(normed)) * up(normed)).
  Tensor mlp(const Tensor& normed, DType compute_dtype) const;

  std::shared_ptr<Communicator> group_;
  int64_t local_heads_, local_kv_heads_, head_dim_;
  int64_t kv_start_ = 0;  // with whole k/v: the first feature of the kv head this rank keeps
  std::shared_ptr<nn::Norm> input_layernorm_, post_attention_layernorm_, q_norm_, k_norm_;
  std::shared_ptr<tp::ColumnParallelLinear> q_proj_, k_proj_, v_proj_, gate_proj_, up_proj_;
  std::shared_ptr<nn::Linear> k_whole_, v_whole_;  // instead of k_proj_ / v_proj_ when tp > n_kv_head
  std::shared_ptr<tp::RowParallelLinear> o_proj_, down_proj_;
};

}  // namespace retort::models
