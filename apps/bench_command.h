#pragma once
// `retort bench ...`: the benchmarks that have a subcommand. `retort bench loss` runs the loss benchmark of
// bench/loss/loss_bench.h (also build/bench/bench_loss, with the same options).
#include <CLI/CLI.hpp>

namespace retort::apps {

// Registers `retort bench loss ...`.
void add_bench_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
