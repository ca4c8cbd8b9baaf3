#pragma once
// Picks the next token of every row from vocab-sharded logits, the same token on every rank of the tp group and
// for every tp size, without gathering the vocabulary: O(rows x k) bytes of communication per step.
//
// Sampling is the Gumbel-max trick: token = argmax_v (logit_v / T + g_v) over the tokens that survive top-k and
// top-p, where g_v is standard Gumbel noise drawn from a counter-based generator keyed by (seed, row key, GLOBAL
// token id). Every rank draws the noise of its own shard, a MAX all-reduce of (score, id) picks the winner, and
// the draw depends neither on how the vocabulary is split nor on which other rows are in the batch.
//   temperature 0: greedy (argmax of the logits, ties to the smaller id).
//   top_k > 0: only the k most likely tokens (the exact distributed top-k of parallel/tp/vocab_topk: ties at the
//              k-th value go to the smaller ids, so exactly k tokens stay; top_k above the vocabulary keeps all).
//   top_p < 1: only the smallest set of most likely tokens whose probability (after temperature and top-k)
//              reaches top_p, plus the tokens tied with its least likely one; the threshold is found with O(rows)
//              all-reduces, never a gather of the vocabulary.
//
// How, and what it costs per call (rows R, k = top_k, tp ranks; every collective is on O(R) or O(R k) values):
//   greedy          the shard's top-1, one MAX all-reduce of R packed (logit, id) doubles.
//   sampling        one read of the shard computing the noise (sampling_math.h), one MAX all-reduce of R packed
//                   (score, id) doubles: score and id share one 64-bit word, so one collective picks the winner.
//   top_k           the shard's local top-k, two all-gathers of R x k values and ids and a final top-k: every
//                   rank then holds the same k candidates, and top_p and the draw run on them on the host
//                   (R x k work, no further collective).
//   top_p, no top_k the row maximum (one MAX all-reduce), then a radix search for the threshold on the float
//                   order keys, 4 bits per pass: 8 passes, each one read of the shard and one SUM all-reduce of
//                   R x 16 fixed-point masses (as 2 doubles each), then the draw as above. Masses are integers
//                   (round(e^{(x - max)/T} 2^44)), so sums are exact and the nucleus is the same bit for bit
//                   whatever the tp size, the backend, or the order of a GPU's atomics.
// The token of a row depends only on its logits, the options, the seed and its key: not on the tp size, not on
// the other rows, and not on the device (CPU and CUDA compute the same integers and doubles, bit for bit).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor/tensor.h"
#include "parallel/comm/communicator.h"

namespace retort::generate {

// The largest top_k: what the GPU top-k kernel selects per row (the same limit on the CPU, so that a setting
// that works on one device works on the other).
inline constexpr int kMaxSamplingTopK = 256;

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;

  // InputError naming the bad option: temperature not finite or < 0, top_k outside [0, kMaxSamplingTopK], top_p
  // outside (0, 1].
  void validate() const;
};

// logits [rows, V_local] (f32 or bf16; CPU or CUDA), split over the vocabulary of `group` (default: the group of
// logits.sharding(); none: the whole vocabulary is local). row_keys[r] makes row r's randomness its own: the
// generator passes (sequence index, position), so a sequence samples the same tokens alone or in any batch.
// Returns the GLOBAL token id of every row, on the host, identical on every rank. Every rank calls it.
// InputError (on every rank alike) for bad options, logits that are not 2-D f32/bf16, a key count that differs
// from the rows, a row with NaN, a row that is all -inf, and (when sampling) a row with a +inf logit.
std::vector<int32_t> sample_next_tokens(const Tensor& logits, const SamplingOptions& options,
                                        const std::vector<uint64_t>& row_keys,
                                        std::shared_ptr<Communicator> group = nullptr);

// A decode step that runs the sampler's shard pass on the device inside the step itself (a CUDA graph, one rank):
// the one pass the options need, and the host's part after it, exactly as sample_next_tokens does for one rank.
enum class SinglePassSampling {
  Argmax,  // temperature 0: each row's largest logit, smallest id among ties (kernels::cuda::enqueue_argmax)
  Gumbel,  // sampling without top_k and top_p: best_gumbel_candidates with no floor (enqueue_best_gumbel)
  None,    // top_k or top_p: several passes with host decisions in between (sample_next_tokens)
};
SinglePassSampling single_pass_sampling(const SamplingOptions& options);
// Each row's token from the pass's packed winners (sampling::pack_candidate of the row's best key and its id); an
// InputError for a row of NaN or all -inf logits (or a +inf one when sampling), as sample_next_tokens.
std::vector<int32_t> tokens_from_winners(const std::vector<uint64_t>& winners, SinglePassSampling pass);

}  // namespace retort::generate
