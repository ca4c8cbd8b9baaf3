#pragma once
// The sampled teacher rows of sampled-logit KD (Anshumann et al., ACL 2025, "Sparse Logit Sampling"): per position, K
// token ids drawn WITH replacement from the proposal r = softmax(logits / (T t)) (the teacher p = softmax(logits / T)
// at the proposal temperature t: r_j ~ p_j^(1/t)), kept as the distinct ids with their counts and importance
// log-ratios log(p_j / r_j), plus the teacher's lse (of logits / T). The loss (losses/topk_distillation.h,
// ForwardKLSampled) turns them into the unbiased targets a_j = (c_j / K) (p_j / r_j).
//
// Vocab-parallel and exact under the split: draw d of a row takes one uniform u in [0, 1) and inverts the proposal's
// CDF over the vocabulary in rank order. Every rank has the per-row log-masses of every shard (one all-gather of
// [rows, 2] floats: O(tokens x tp), never O(tokens x vocab)), so every rank knows which shard's slice of [0, 1) holds
// u; that rank alone inverts its shard's CDF at (u - C_{r-1}) / M_r. P(id j) = M_r (r_j / M_r) = r_j. The chosen ids
// and log-ratios reach every rank with one SUM all-reduce of [rows, K] (the other ranks add 0). The uniforms come
// from a counter-based hash of (seed, stream position, draw), so the draws do not depend on the batching, a resumed
// cache is byte-identical, and tp 1 and tp N draw the same ids up to float rounding at the shard borders.
//
// The passes run on the host in double (the teacher's forward dominates the cost: one read of the logits).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor/tensor.h"
#include "parallel/comm/communicator.h"

namespace retort::distill {

struct VocabSampleOptions {
  int draws = 64;                   // K per row
  double temperature = 1.0;         // T: the teacher the weights refer to, p = softmax(logits / T)
  double proposal_temperature = 1;  // t: the ids are drawn from r ~ p^(1/t)
  uint64_t seed = 0;
  // The tp group the logits' vocabulary is split over (rank r holds [r V_local, (r + 1) V_local)); null: one rank.
  std::shared_ptr<Communicator> group = nullptr;
};

// Rows of K slots each: the distinct ids drawn in ascending order, then filler ids (count 0, the smallest ids not
// drawn) so that a row's ids are distinct, as the loss requires. The same on every rank.
struct VocabSample {
  int64_t rows = 0;
  int draws = 0;
  std::vector<int32_t> indices;   // [rows * K]
  std::vector<uint16_t> counts;   // [rows * K], a row adds up to K
  std::vector<float> log_ratios;  // [rows * K], log(p_j / r_j); 0 at t = 1 and for filler ids
  std::vector<float> lse;         // [rows], the teacher's log-sum-exp of logits / T
};

// logits [..., V_local] (f32 or bf16, any device: they are read on the host), `positions` the stream position of
// every row (rows = logits.numel() / V_local of them): the key of the row's draws.
VocabSample sample_vocab(const Tensor& logits, std::span<const int64_t> positions, const VocabSampleOptions& options);

// The uniform in [0, 1) of draw `draw` at stream position `position` (a splitmix64 hash; 53 bits).
double sample_uniform(uint64_t seed, int64_t position, int draw);

}  // namespace retort::distill
