#pragma once
// The loss benchmark: forward + backward of a loss over bf16 logits [tokens, vocab], timed per step, for retort's
// fused cross-entropy and forward / reverse KL, on one device (--tp 1: variants fused and one_read) or
// vocab-parallel over N ranks, one GPU each (--tp N: fused_tp, manual_tp, gather; loss_variants.h says what each
// is, loss_measurement.h what is measured). `retort bench loss` and build/bench/bench_loss both run it;
// bench/loss_bench_torch.py measures the same losses in PyTorch eager and torch.compile with the same JSON
// fields, and bench/run_loss_bench.sh runs everything.
#include <string>
#include <vector>

#include "bench/loss/loss_bench_options.h"

namespace retort::bench {

// Runs the benchmark, printing its table on rank 0. With tp > 1 outside a launcher it starts tp local ranks of
// `self` (argv[0] and any subcommand words, e.g. {"/proc/self/exe", "bench", "loss"}) with the same options, and
// returns their exit status.
int run_loss_bench(const LossBenchOptions& options, const std::vector<std::string>& self);

}  // namespace retort::bench
