// The loss benchmark as a stand-alone program: forward + backward of retort's fused losses over bf16 logits (time,
// bandwidth as a share of the device-to-device copy bandwidth, peak extra memory), on one device or vocab-parallel
// over N ranks. bench/loss/ holds the benchmark (it is also `retort bench loss`); the options are the same.
// bench/loss_bench_torch.py measures PyTorch eager and torch.compile with the same JSON fields, and
// bench/run_loss_bench.sh runs everything and prints the tables.
//   build/bench/bench_loss --json retort.jsonl                                    # one GPU
//   build/apps/retort launch --nproc 2 --exec -- build/bench/bench_loss --tp 2   # fused_tp, manual_tp, gather
//   build/bench/bench_loss --device cpu --tokens 256 --vocab 4096                 # a quick check on the CPU
#include "bench/loss/loss_bench.h"

#include <CLI/CLI.hpp>

#include "bench/harness/bench_main.h"

int main(int argc, char** argv) {
  retort::bench::LossBenchOptions options;
  CLI::App app{
      "retort loss benchmark: forward + backward of the fused losses over bf16 logits, one device or --tp N ranks\n"
      "  bench_loss [options]      (--tp N: under `retort launch --nproc N --exec --`, or it starts the ranks)"};
  retort::bench::add_loss_bench_options(app, options);
  CLI11_PARSE(app, argc, argv);
  return retort::bench::run_reporting_rank("bench_loss",
                                           [&] { return retort::bench::run_loss_bench(options, {"/proc/self/exe"}); });
}
