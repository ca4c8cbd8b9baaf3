#pragma once
// The loss benchmark's options and their command-line flags, shared by `retort bench loss` and build/bench/
// bench_loss so that both take the same flags with the same help.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace retort::bench {

struct LossBenchOptions {
  std::vector<std::string> losses{"ce", "fkl", "rkl"};
  std::vector<int64_t> vocabs{32768, 65536, 131072};
  int64_t tokens = 4096;
  int tp = 1;                         // > 1: one rank per GPU, vocab-parallel variants
  std::vector<std::string> variants;  // empty: fused, one_read (tp 1) or fused_tp, manual_tp, gather (tp > 1)
  std::string device;                 // cpu, cuda, cuda:N; empty: cuda when a GPU is visible, else cpu
  int iters = 20;
  int warmup = 5;
  double logit_std = 2.0;  // logits ~ N(0, std^2), student and teacher drawn independently
  uint64_t seed = 1234;
  int64_t copy_mib = 0;     // buffer of the device-to-device copy that sets the bandwidth scale; 0: 1024 GPU, 64 CPU
  std::string json;         // rank 0 writes one JSON line per (loss, vocab, variant) here
  bool check_grads = true;  // compare each variant's gradient with the first variant's (tp > 1)
  std::vector<std::string> simulate_oom;  // variants that throw an out-of-memory error (tests the OOM path)
};

// Adds the options above to `cmd`.
void add_loss_bench_options(CLI::App& cmd, LossBenchOptions& options);

// The flags that give `options` back: what each rank is started with when the benchmark launches its own ranks.
std::vector<std::string> loss_bench_arguments(const LossBenchOptions& options);

// "a,b,c": lists as the flags take them.
std::string comma_joined(const std::vector<std::string>& items);

}  // namespace retort::bench
