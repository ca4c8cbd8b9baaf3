#pragma once
// Autoregressive generation from a GptModel: the prompts are prefilled into a KV cache in one forward, then every
// step feeds each unfinished sequence its last token and samples the next one from the vocab-sharded logits.
// Token level only (the caller owns the tokenizer, text and stop strings through the callback).
#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/generate/vocab_sampler.h"
#include "parallel/gpt_model.h"

namespace retort::generate {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  DType compute_dtype = DType::F32;
  // Called on every rank after each step with the sequence index and its new token; returning false finishes
  // that sequence (a stop string, an end-of-text token). Must return the same on every rank.
  std::function<bool(int64_t sequence, int32_t token)> on_token;
};

enum class FinishReason { MaxTokens, Stopped, ContextFull };

struct GeneratedSequence {
  std::vector<int32_t> tokens;  // the new tokens only
  FinishReason finish = FinishReason::MaxTokens;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// prompts: token ids, each non-empty and shorter than the model's block_size (InputError otherwise, naming the
// prompt). A sequence ends after max_new_tokens, when on_token says so, or when it fills the context. Every rank of
// the model's tp group calls it with the same prompts and options.
std::vector<GeneratedSequence> generate_tokens(const GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerationOptions& options);

}  // namespace retort::generate
