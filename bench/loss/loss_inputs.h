#pragma once
// The benchmark's inputs: this rank's columns of random bf16 logits (student, and teacher for KL) and the
// targets, the same global numbers whatever the tp, so that every variant and every tp computes the same loss.
#include <cstdint>
#include <vector>

#include "bench/loss/loss_setup.h"
#include "core/tensor/tensor.h"

namespace retort::bench {

struct LossInputs {
  int64_t vocab = 0;
  int64_t vocab_local = 0;
  Tensor student;  // bf16 [tokens, vocab_local], requires a gradient
  Tensor teacher;  // bf16 [tokens, vocab_local] (KL only)
  Tensor targets;  // i32 [tokens], global ids, on the device
  std::vector<int32_t> host_targets;
};

LossInputs make_loss_inputs(const LossRun& run, const LossBenchOptions& options, LossKind kind, int64_t vocab);

}  // namespace retort::bench
