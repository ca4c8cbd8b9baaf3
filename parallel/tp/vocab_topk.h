#pragma once
// The teacher side of top-k distillation over vocab-sharded logits: the full-vocabulary log-softmax statistics
// and the EXACT top-k of every row, identical on every rank of the tp group.
//   lse = log sum_j exp(x_j / T) over the whole vocabulary: each rank's local log-sum-exp, a MAX all-reduce,
//         then a SUM all-reduce of exp(local - max); O(rows) bytes.
//   top-k: each rank takes its local top-min(k, V_local) with GLOBAL ids (rank r owns [r V_local, (r+1) V_local)),
//         the candidates are all-gathered (tp x min(k, V_local) per row) and a final top-k over them picks the
//         global top-k. Exact: the global top-k is inside the union of the local ones under the same order.
// Order: descending logit, ties to the smaller global id, so the result does not depend on the tp size.
#include <memory>

#include "parallel/comm/communicator.h"

namespace retort::tp {

struct VocabTopKOptions {
  int k = 64;
  double temperature = 1.0;  // the statistics are those of softmax(logits / temperature)
  // The group the vocabulary is split over; by default the one on logits.sharding() (split on the last dim).
  std::shared_ptr<Communicator> group;
};

struct VocabTopK {
  Tensor indices;   // i32 [N, k]: global vocabulary ids, descending by log-probability
  Tensor logprobs;  // f32 [N, k]: logit / T - lse (normalised over the FULL vocabulary)
  Tensor lse;       // f32 [N]
};

// logits [..., V_local] (f32 or bf16; CPU or CUDA), N = the product of the leading dims. Every rank of the
// group calls it (collectives inside). k must not exceed the global vocabulary (tp x V_local). The results
// are on the logits' device. A row whose logits are all -inf has no distribution: lse -inf, log-probs NaN.
VocabTopK vocab_topk(const Tensor& logits, const VocabTopKOptions& options = {});

}  // namespace retort::tp
