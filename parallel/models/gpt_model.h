#pragma once
// A GPT-style decoder: token + learned position embeddings, N pre-norm blocks of causal self-attention
// and a GELU MLP, a final norm and an LM head (optionally tied to the token embedding).
// Built from the tensor-parallel layers of parallel/tp: with a tp group of n ranks, each rank holds n_head / n
// attention heads (its rows of q, k and v; its columns of the output projection), 1/n of the MLP width and
// 1/n of the vocabulary (embedding rows and LM-head rows), and the logits stay sharded over the vocabulary.
// Without a group (or with one rank) it is the plain dense model, parameter for parameter.
#include <memory>
#include <string>
#include <vector>

#include "core/nn/layers.h"
#include "parallel/tp/layers.h"

namespace retort::generate {
class KvCache;
}

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
  // validate() plus: the heads, the MLP width and the vocabulary divide by tp (an InputError naming the value).
  void validate_for_tp(int tp) const;
};

class GptBlock : public nn::Module {
 public:
  GptBlock(const GptConfig& config, const std::shared_ptr<Communicator>& tp_group);
  Tensor forward(const Tensor& x, DType compute_dtype) const;
  // x [B, T_new, C] of new positions; reads and extends layer `layer` of the cache (see GptModel::forward_cached).
  Tensor forward_cached(const Tensor& x, generate::KvCache& cache, int64_t layer, DType compute_dtype) const;

 private:
  int64_t local_heads_;
  std::shared_ptr<nn::Norm> ln_1_, ln_2_;
  std::shared_ptr<tp::ColumnParallelLinear> qkv_, fc_;
  std::shared_ptr<tp::RowParallelLinear> attn_proj_, mlp_proj_;
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

  // ids i32 [B, T] -> logits [B, T, vocab / tp] in compute_dtype (f32 or bf16; parameters stay f32), sharded
  // over the tp group (logits.sharding()) when there is one.
  Tensor forward(const Tensor& ids, DType compute_dtype = DType::F32) const;

  // Inference with a KV cache, no tape. ids i32 [B, T_new] (right-padded): row b has valid[b] <= T_new real tokens,
  // at positions cache.length(b), cache.length(b) + 1, ... (each < cache.capacity()). Returns the logits of each
  // row's LAST valid position, [B, V_local] sharded like forward()'s (rows with valid 0: meaningless, ignore), and
  // advances the cache by `valid`. Prefill is one call with the prompts; decoding is one call per token with T_new 1.
  Tensor forward_cached(const Tensor& ids, const std::vector<int64_t>& valid, generate::KvCache& cache,
                        DType compute_dtype = DType::F32) const;

  const GptConfig& config() const { return config_; }
  const std::shared_ptr<Communicator>& tp_group() const { return tp_group_; }

 private:
  GptConfig config_;
  std::shared_ptr<Communicator> tp_group_;
  std::shared_ptr<tp::VocabParallelEmbedding> wte_;
  std::shared_ptr<nn::Embedding> wpe_;
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  std::shared_ptr<nn::Norm> ln_f_;
  std::shared_ptr<tp::ColumnParallelLinear> lm_head_;  // absent when tied
};

}  // namespace retort
