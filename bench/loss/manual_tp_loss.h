#pragma once
// manual_tp: the vocab-parallel loss with the same O(tokens) communication as retort's fused kernels, composed
// from core/kernels and the Communicator as a user without the fused losses would write it. It is the reference
// that says what the fusion buys:
//   forward   per-row log-sum-exp of the shard, an all-gather of those [tokens, tp], their log-sum-exp and softmax
//             (the global lse and this shard's weight exp(lse_r - lse)); the target logit by a gather and a SUM
//             all-reduce (for KL a row dot product E_p[t - x] by a batched GEMM and a SUM all-reduce)
//   backward  a materialised softmax, a row scaling (batched GEMM) and a scatter of the one-hot term
// core has no row-max or exp kernel, so the shard's log-sum-exp is kernels::cross_entropy_forward with every row
// ignored.
#include "bench/loss/loss_variants.h"

namespace retort::bench {

// One manual_tp step of `kind` on this rank's shard (run.comm is the tp group); run and inputs must outlive it.
LossStep manual_tp_step(const LossRun& run, const LossInputs& inputs, LossKind kind);

}  // namespace retort::bench
