#pragma once
// The decoder-only transformer of every model family retort runs, chosen by GptConfig::family:
//   gpt    token + learned position embeddings, N pre-norm blocks of causal self-attention (fused q|k|v) and a
//          GELU MLP, a final norm and an LM head (optionally tied to the token embedding);
//   llama  the Llama decoder (decoder_layer.h): RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP, no
//          biases; its modules carry the Hugging Face parameter names (model.embed_tokens.weight, ...);
//   qwen2  llama with q/k/v biases;   qwen3  llama with a per-head RMSNorm of q and k before the rotation.
// Built from the tensor-parallel layers of parallel/tp: with a tp group of n ranks, each rank holds n_head / n
// attention heads (its rows of q, k and v; its columns of the output projection), 1/n of the MLP width and
// 1/n of the vocabulary (embedding rows and LM-head rows), and the logits stay sharded over the vocabulary.
// Key/value heads split the same way when they divide by n; when there are fewer of them than ranks (n a multiple
// of n_kv_head), each rank computes them all and keeps the one its query heads read.
// A vocabulary that does not divide by n is padded to the next multiple with zero rows; the logits of the padded
// ids are -inf, so no loss, top-k or sampler can pick them.
// Without a group (or with one rank) it is the plain dense model, parameter for parameter.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/kernels/decode_kernels.h"
#include "core/nn/layers.h"
#include "core/ops/decode_ops.h"
#include "parallel/models/rope.h"
#include "parallel/tp/layers.h"

namespace retort::generate {
class KvCache;
}

namespace retort {

namespace models {
class DecoderLayer;
}

struct GptConfig {
  std::string family = "gpt";  // gpt | llama | qwen2 | qwen3
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
  // The Llama family (ignored by gpt): 0 means "derived" in each of the three sizes.
  int64_t n_kv_head = 0;          // key/value heads (grouped-query attention); 0: n_head
  int64_t head_dim = 0;           // 0: n_embd / n_head
  int64_t intermediate_size = 0;  // the SwiGLU width; 0: mlp_ratio * n_embd
  bool qkv_bias = false;          // biases on q, k and v (qwen2; also llama / qwen3 with attention_bias)
  bool out_bias = false;          // a bias on the attention output (llama / qwen3 with attention_bias)
  bool qk_norm = false;           // per-head RMSNorm of q and k before the rotation (qwen3)
  RopeConfig rope;

  bool llama_family() const { return family != "gpt"; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t mlp_width() const { return intermediate_size > 0 ? intermediate_size : mlp_ratio * n_embd; }
  // The vocabulary rounded up to a multiple of tp: the rows the embedding and the head hold over all ranks.
  int64_t padded_vocab(int tp) const { return (vocab_size + tp - 1) / tp * tp; }
  // Key/value heads each rank holds: n_kv_head / tp, or 1 when tp is a multiple of n_kv_head.
  int64_t local_kv_heads(int tp) const { return kv_heads() >= tp ? kv_heads() / tp : 1; }

  void validate() const;  // InputError naming the first bad value
  // validate() plus: the heads and the MLP width divide by tp, and the key/value heads divide by tp or tp by them
  // (an InputError naming the values).
  void validate_for_tp(int tp) const;
};

// The residual stream between blocks in training: `x`, plus `pending`, the previous block's last output not yet
// added to it (undefined at the first block). The next norm adds it in the same kernel (ops::add_layer_norm), so
// a block boundary costs one pass over the stream instead of an add and a norm. In a decode step past the fused rows
// the pending output may instead be a product left as partial sums (`pending_partials`, ops::linear_partials), which
// the next norm adds up the same way (ops::add_partials_norm).
struct ResidualStream {
  Tensor x, pending;
  ops::PartialProducts pending_partials = {};
};

class GptBlock : public nn::Module {
 public:
  GptBlock(const GptConfig& config, const std::shared_ptr<Communicator>& tp_group);
  Tensor forward(const Tensor& x, DType compute_dtype) const;
  // The block on a stream with a pending addition; returns {x + attention part, the MLP output still pending}.
  ResidualStream forward_stream(const ResidualStream& in, DType compute_dtype) const;
  // The same over new positions [B, T_new, C] only; reads and extends layer `layer` of the cache (see
  // GptModel::forward_cached). starts: i32 [B] on the stream's device, where each row's new positions begin (the
  // cache lengths).
  ResidualStream forward_cached(const ResidualStream& in, generate::KvCache& cache, int64_t layer, const Tensor& starts,
                                DType compute_dtype) const;
  // This block's tensors in `compute_dtype` (its norms folded into the products after them, kept until a weight
  // changes) and its layer of the cache, for ops::gpt_decode_layers; whether the block can take that path at all (a
  // LayerNorm block on one rank).
  kernels::GptDecodeLayer decode_layer(generate::KvCache& cache, int64_t layer, DType compute_dtype) const;
  bool takes_decode_layers() const;

 private:
  // forward_cached over few rows in four fused products and the attention (ops::decode_fusion_applies): LN1 + q|k|v,
  // the attention, its projection + the residual add, LN2 + fc + GELU, the MLP projection + the residual add. Returns
  // the stream with nothing pending.
  ResidualStream forward_cached_fused(const ResidualStream& in, generate::KvCache& cache, int64_t layer,
                                      const Tensor& starts, DType compute_dtype) const;
  // forward_cached past the fused rows (ops::decode_partial_products_apply): the norms and the q|k|v and fc products as
  // in around_attention, and the two output projections as partial sums that the norm after each adds up with the
  // residual, so neither product needs a split-K reduction nor its own add. Returns the MLP's projection pending as
  // partials.
  ResidualStream forward_cached_partials(const ResidualStream& in, generate::KvCache& cache, int64_t layer,
                                         const Tensor& starts, DType compute_dtype) const;
  // The block around an attention that maps the fused q|k|v projection [B, T, 3C / tp] to [B, T, C / tp].
  template <typename Attend>
  ResidualStream around_attention(const ResidualStream& in, DType compute_dtype, const Attend& attend) const;

  int64_t local_heads_;
  bool distributed_;  // a tp group of several ranks: the fused decode path does not apply
  std::shared_ptr<nn::Norm> ln_1_, ln_2_;
  std::shared_ptr<tp::ColumnParallelLinear> qkv_, fc_;
  std::shared_ptr<tp::RowParallelLinear> attn_proj_, mlp_proj_;
  mutable ops::FoldedNormCache qkv_fold_, fc_fold_;  // decode_layer's LN1 + q|k|v and LN2 + fc
};

class GptModel : public nn::Module {
 public:
  // tp_group: the tensor-parallel group (parallel/process_grid.h); null for a dense model.
  explicit GptModel(const GptConfig& config, std::shared_ptr<Communicator> tp_group = nullptr);

  // GPT-2's initialisation: N(0, init_std) for weights, init_std / sqrt(2 n_layer) for the projections
  // that write into the residual stream, zero biases, unit norm weights. Deterministic in `seed`, and the same
  // at every tp: each rank draws the full tensor and keeps its shard, so a tp = n model starts exactly where
  // the dense one does.
  void initialize(uint64_t seed);

  // ids i32 [B, T] -> logits [B, T, padded_vocab / tp] in compute_dtype (f32 or bf16; parameters stay f32), sharded
  // over the tp group (logits.sharding()) when there is one.
  Tensor forward(const Tensor& ids, DType compute_dtype = DType::F32) const;

  // Inference with a KV cache, no tape. ids i32 [B, T_new] (right-padded): row b has valid[b] <= T_new real tokens,
  // at positions cache.length(b), cache.length(b) + 1, ... (each < cache.capacity()). Returns the logits of each
  // row's LAST valid position, [B, V_local] sharded like forward()'s (rows with valid 0: meaningless, ignore), and
  // advances the cache by `valid`. Prefill is one call with the prompts; decoding is one call per token with T_new 1.
  Tensor forward_cached(const Tensor& ids, const std::vector<int64_t>& valid, generate::KvCache& cache,
                        DType compute_dtype = DType::F32) const;

  // One decode step (T_new = 1 for every row) with every shape fixed and every input already on the device, so
  // that it enqueues only device work (no host copy, no wait) and can be captured into a CUDA graph and replayed:
  // ids i32 [B, 1], positions i32 [B, 1] (row b's token goes to position positions[b] = the row's cache length;
  // written there before the step runs), inv_freq = rope_frequencies(device) (the Llama family; undefined for gpt).
  // Returns the logits [B, V_local] like forward_cached's, bit for bit the same; does NOT advance the cache (the
  // caller owns the lengths: KvCache::advance).
  Tensor decode_step(const Tensor& ids, const Tensor& positions, const Tensor& inv_freq, generate::KvCache& cache,
                     DType compute_dtype) const;

  // A copy of this model for inference in `compute_dtype` (bf16): every parameter that the forward casts to the
  // compute dtype on each use (the projections, the LM head, and for gpt the norms) is cast once here, so a
  // generation step reads half the bytes and launches no cast kernels; the embedding tables, and the Llama norms
  // that run in float32, stay float32 and share this model's storage. A tied LM head becomes an untied bf16 copy of
  // the token embedding (the embedding lookup keeps its float32 rows). The copy computes exactly the logits this
  // model computes in `compute_dtype`, bit for bit. Same tp group and device; build it after the last change of
  // the weights (it copies them). For f32 compute there is nothing to cast: it returns null (use this model).
  std::shared_ptr<GptModel> inference_copy(DType compute_dtype) const;

  // inv_freq (rope.h) on `device` for the Llama family; undefined for gpt (learned positions).
  Tensor rope_frequencies(Device device) const;

  const GptConfig& config() const { return config_; }
  const std::shared_ptr<Communicator>& tp_group() const { return tp_group_; }
  // Key/value heads this rank caches per layer, and their width (the KV cache's shape).
  int64_t local_kv_heads() const;
  int64_t head_dim() const { return config_.head_size(); }

 private:
  Tensor embed(const Tensor& ids, const Tensor& positions, DType compute_dtype) const;
  // A small constant the forward needs on `device` on every call (each row's positions 0..T-1, the rotary
  // frequencies, the padded ids' mask), made by `make` on first use and kept per key and device: a copy from host
  // memory on every forward would wait for the device each time and could not be recorded in a CUDA graph.
  const Tensor& device_constant(const std::string& key, Device device, const std::function<Tensor()>& make) const;
  // embed() for inference with the cache: one fused lookup when ops::decode_fusion_allows (the same values).
  Tensor decode_embed(const Tensor& ids, const Tensor& positions, DType compute_dtype) const;
  // The final norm and the head: logits [..., padded_vocab / tp], padded ids at -inf.
  Tensor head(const Tensor& x, DType compute_dtype) const;
  // The head on the final norm's output.
  Tensor head_of_normed(const Tensor& normed, DType compute_dtype) const;
  // head() for inference with the cache: the final norm and the head in one fused product over few rows
  // (ops::decode_fusion_applies).
  Tensor decode_head(const Tensor& x, DType compute_dtype) const;
  // The padded ids of the logits at -inf (a model whose vocabulary was padded for tp), tagged with the real extent.
  Tensor masked(const Tensor& logits) const;
  // The blocks over the new positions x [B, T_new, C] at `positions` (i32 [B, T_new]), each row's starting at
  // starts[b] (i32 [B]), reading and extending the cache.
  Tensor cached_layers(Tensor x, const Tensor& positions, const Tensor& inv_freq, const Tensor& starts,
                       generate::KvCache& cache, DType compute_dtype) const;

  GptConfig config_;
  std::shared_ptr<Communicator> tp_group_;
  std::shared_ptr<tp::VocabParallelEmbedding> wte_;
  std::shared_ptr<nn::Embedding> wpe_;                         // gpt only
  std::vector<std::shared_ptr<GptBlock>> blocks_;              // gpt
  std::vector<std::shared_ptr<models::DecoderLayer>> layers_;  // the Llama family
  std::shared_ptr<nn::Norm> ln_f_;
  std::shared_ptr<tp::ColumnParallelLinear> lm_head_;  // absent when tied
  Tensor vocab_mask_;  // f32 [padded_vocab / tp]: 0, or -inf at padded ids; undefined without padding
  mutable ops::PaddedRowsCache head_rows_;  // decode_head's weight at a vocabulary not a multiple of 8
  // device_constant's tensors, by key and device.
  mutable std::mutex constants_mutex_;
  mutable std::map<std::string, Tensor> constants_;
};

}  // namespace retort
