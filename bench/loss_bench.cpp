// The loss benchmark as a stand-alone program: forward + backward of retort's fused losses over bf16 logits (time,
// bandwidth as a share of the device-to-device copy bandwidth, peak extra memory), on one device or vocab-parallel
// over N ranks. apps/bench_command.cpp holds the benchmark (it is also `retort bench loss`); the options are the
// same. bench/loss_bench_torch.py measures PyTorch eager and torch.compile with the same JSON fields, and
// bench/run_loss_bench.sh runs everything and prints the tables.
//   build/bench/bench_loss --json retort.jsonl                                    # one GPU
//   build/apps/retort launch --nproc 2 --exec -- build/bench/bench_loss --tp 2   # fused_tp, manual_tp, gather
//   build/bench/bench_loss --device cpu --tokens 256 --vocab 4096                 # a quick check on the CPU
#include <cstdio>
#include <exception>

#include "apps/bench_command.h"
#include "parallel/comm/rendezvous.h"

int main(int argc, char** argv) {
  retort::apps::LossBenchOptions options;
  CLI::App app{
      "retort loss benchmark: forward + backward of the fused losses over bf16 logits, one device or --tp N ranks\n"
      "  bench_loss [options]      (--tp N: under `retort launch --nproc N --exec --`, or it starts the ranks)"};
  retort::apps::add_loss_bench_options(app, options);
  CLI11_PARSE(app, argc, argv);
  int rank = 0;
  try {
    rank = retort::read_launch_env().rank;
    return retort::apps::run_loss_bench(options, {"/proc/self/exe"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_loss (rank %d): %s\n", rank, e.what());
    return 1;
  }
}
