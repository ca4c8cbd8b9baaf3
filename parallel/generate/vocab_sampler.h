#pragma once
// Picks the next token of every row from vocab-sharded logits, the same token on every rank of the tp group and
// for every tp size, without gathering the vocabulary: O(rows x k) bytes of communication per step.
//
// Sampling is the Gumbel-max trick: token = argmax_v (logit_v / T + g_v) over the tokens that survive top-k and
// top-p, where g_v is standard Gumbel noise drawn from a counter-based generator keyed by (seed, row key, GLOBAL
// token id). Every rank draws the noise of its own shard, a MAX all-reduce of (score, id) picks the winner, and
// the draw depends neither on how the vocabulary is split nor on which other rows are in the batch.
//   temperature 0: greedy (argmax of the logits, ties to the smaller id).
//   top_k > 0: only the k most likely tokens (the exact distributed top-k of parallel/tp/vocab_topk).
//   top_p < 1: only the smallest set of most likely tokens whose probability (after temperature and top-k)
//              reaches top_p; the threshold is found with O(rows) all-reduces, never a gather of the vocabulary.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor/tensor.h"
#include "parallel/comm/communicator.h"

namespace retort::generate {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;

  void validate() const;  // InputError naming the bad option (temperature < 0, top_k < 0, top_p outside (0, 1])
};

// logits [rows, V_local] (f32 or bf16; CPU or CUDA), split over the vocabulary of `group` (default: the group of
// logits.sharding(); none: the whole vocabulary is local). row_keys[r] makes row r's randomness its own: the
// generator passes (sequence index, position), so a sequence samples the same tokens alone or in any batch.
// Returns the GLOBAL token id of every row, on the host, identical on every rank. Every rank calls it.
std::vector<int32_t> sample_next_tokens(const Tensor& logits, const SamplingOptions& options,
                                        const std::vector<uint64_t>& row_keys,
                                        std::shared_ptr<Communicator> group = nullptr);

}  // namespace retort::generate
