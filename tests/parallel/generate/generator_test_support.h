#pragma once
// Shared by the generation tests: a tiny GPT whose weights are large enough that its next-token logits are never
// close to a tie, and the references generation is checked against: the full GptModel::forward re-run over the
// whole sequence at every step, its (gathered) logits' argmax for greedy decoding, and the sampler applied to its
// last row with the generator's row key for sampled decoding.
#include <gtest/gtest.h>

#include <vector>

#include "core/autograd/grad_mode.h"
#include "parallel/generate/generator.h"
#include "parallel/models/gpt_model.h"
#include "parallel/tp/sharding.h"

namespace retort::generate_testing {

inline GptConfig tiny_config() {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.tie_weights = false;
  c.init_std = 0.3;
  return c;
}

// Prompts of different lengths; the 6- and 12-token ones reach the 16-token context within 12 new tokens.
inline std::vector<std::vector<int32_t>> tiny_prompts() {
  return {{5}, {17, 3, 40}, {9, 9, 1, 63, 22, 30}, {0, 11, 52, 7}, {2, 4, 8, 16, 32, 1, 3, 5, 7, 9, 11, 13}};
}

// The logits of the last position of `sequence` from the full forward, over the whole vocabulary (gathered).
inline std::vector<double> full_forward_last_logits(const GptModel& model, const std::vector<int32_t>& sequence,
                                                    DType dtype) {
  NoGradGuard no_grad;
  const Device device = model.named_parameters().front().second.device();
  const int64_t T = static_cast<int64_t>(sequence.size());
  Tensor logits = model.forward(Tensor::from_ints(sequence, {1, T}, device), dtype);
  if (logits.sharding().is_sharded()) logits = tp::gather_full(logits, logits.sharding());
  const std::vector<double> all = logits.to_doubles();
  const int64_t V = model.config().vocab_size;
  return std::vector<double>(all.end() - V, all.end());
}

inline int32_t argmax(const std::vector<double>& row) {
  size_t best = 0;
  for (size_t v = 1; v < row.size(); ++v)
    if (row[v] > row[best]) best = v;  // ties to the smaller id
  return static_cast<int32_t>(best);
}

// Greedy decoding by the full forward: stops after max_new tokens or when prompt + new fills the context.
inline std::vector<int32_t> greedy_by_full_forward(const GptModel& model, std::vector<int32_t> sequence,
                                                   int64_t max_new, DType dtype = DType::F32) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new &&
         static_cast<int64_t>(sequence.size()) < model.config().block_size) {
    out.push_back(argmax(full_forward_last_logits(model, sequence, dtype)));
    sequence.push_back(out.back());
  }
  return out;
}

// Sampled decoding by the full forward: each step samples the last row of the forward's (local) logits with the
// row key the generator gives that position of sequence `id`.
inline std::vector<int32_t> sampled_by_full_forward(const GptModel& model, std::vector<int32_t> sequence,
                                                    int64_t max_new, const generate::SamplingOptions& sampling,
                                                    uint64_t id) {
  NoGradGuard no_grad;
  const Device device = model.named_parameters().front().second.device();
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new &&
         static_cast<int64_t>(sequence.size()) < model.config().block_size) {
    const int64_t T = static_cast<int64_t>(sequence.size());
    const Tensor logits = model.forward(Tensor::from_ints(sequence, {1, T}, device));
    const int64_t v_local = logits.size(-1);
    Tensor last = logits.view({T, v_local}).rows(T - 1, 1).clone();
    ShardingSpec spec = logits.sharding();
    if (spec.partition_dim >= 0) spec.partition_dim = 1;  // the vocabulary is the last dim of [1, V_local] too
    last.set_sharding(spec);
    const auto next =
        generate::sample_next_tokens(last, sampling, {generate::sequence_row_key(id, T)}, model.tp_group());
    out.push_back(next.at(0));
    sequence.push_back(out.back());
  }
  return out;
}

inline std::vector<std::vector<int32_t>> tokens_of(const std::vector<generate::GeneratedSequence>& generated) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& g : generated) out.push_back(g.tokens);
  return out;
}

}  // namespace retort::generate_testing
