#pragma once
// The model-family options the benchmarks share (bench_train_throughput, bench_generate): --family and the Llama
// family's sizes on the command line, and the architecture each family implies once they are parsed.
#include <CLI/CLI.hpp>

#include "parallel/models/gpt_model.h"

namespace retort::bench {

// --family, --kv-heads, --intermediate and --rope-theta into `config`.
void add_family_options(CLI::App& app, GptConfig& config);

// After parsing: the Llama family (llama, qwen2, qwen3) takes RMSNorm and no biases, Qwen2 biases on q, k and v,
// Qwen3 the per-head norm of q and k; gpt keeps its LayerNorm and biases.
void apply_family_architecture(GptConfig& config);

}  // namespace retort::bench
