#pragma once
// Autoregressive generation from a GptModel: the prompts are prefilled into a KV cache in one forward, then every
// step feeds each unfinished sequence its last token and samples the next one from the vocab-sharded logits.
// Token level only (the caller owns the tokenizer, text and stop strings through the callback).
#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/generate/vocab_sampler.h"
#include "parallel/models/gpt_model.h"

namespace retort::generate {

struct GenerationOptions {
  int64_t max_new_tokens = 64;  // at least 1
  SamplingOptions sampling;
  DType compute_dtype = DType::F32;
  // On a GPU without a tp group, every decode step after the first two replays one CUDA graph of the whole step
  // (parallel/generate/graphed_decode_step.h): the same tokens, bit for bit, without a host launch per kernel, and
  // with greedy or plain sampling the next step is launched before the host reads this one's tokens.
  // false (or RETORT_DECODE_GRAPHS=0 in the environment) launches every kernel of every step from the host.
  bool cuda_graphs = true;
  // The model's GptModel::inference_copy(compute_dtype) to run on; null: each call makes its own (one pass over the
  // weights and a model's worth of host allocations). A caller generating many batches with unchanged weights makes
  // it once and passes it to every call.
  std::shared_ptr<const GptModel> inference_model;
  // The identity of each prompt's sequence (empty: 0, 1, ..., n - 1). The sampler keys a row by (sequence id,
  // position), so a sequence draws the same tokens alone or in any batch when it keeps its id: a caller that
  // splits prompts into batches passes each prompt's global index. Sized like the prompts when given.
  std::vector<uint64_t> sequence_ids;
  // Called on every rank after each step with the sequence index and its new token; returning false finishes
  // that sequence (a stop string, an end-of-text token). Must return the same on every rank.
  std::function<bool(int64_t sequence, int32_t token)> on_token;
};

enum class FinishReason { MaxTokens, Stopped, ContextFull };

struct GeneratedSequence {
  std::vector<int32_t> tokens;  // the new tokens only
  FinishReason finish = FinishReason::MaxTokens;
  double prefill_seconds = 0.0;    // the batch's prefill forward and its first token (shared by the batch)
  double decode_seconds = 0.0;     // from the end of the prefill to this sequence's last token
  int64_t decode_graph_nodes = 0;  // nodes of the CUDA graph the batch's decode steps replayed; 0: no graph
};

// The sampler's row key of the token sampled at `position` (its index in the prompt + completion) of sequence
// `sequence_id`: a mix of both, so distinct pairs draw independent noise.
uint64_t sequence_row_key(uint64_t sequence_id, int64_t position);

// prompts: token ids, each non-empty, shorter than the model's block_size and within its vocabulary (InputError
// otherwise, naming the prompt). A sequence ends after max_new_tokens, when on_token says so, or when it fills the
// context (prompt + new tokens = block_size). The batch shares one KV cache: one right-padded prefill forward,
// then one decode forward per step for the unfinished rows. With bf16 compute the forward runs on a bf16 copy of
// the weights made once per call (GptModel::inference_copy: the same logits, without a cast of every weight at
// every step). Every rank of the model's tp group calls it with the
// same prompts and options; every rank returns the same tokens.
std::vector<GeneratedSequence> generate_tokens(const GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerationOptions& options);

}  // namespace retort::generate
