// `retort bench loss`: the command line of the loss benchmark, which lives in bench/loss/ (bench_loss is the same
// benchmark as a stand-alone program).
#include "apps/bench_command.h"

#include <memory>

#include "bench/loss/loss_bench.h"

namespace retort::apps {

void add_bench_command(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: `retort bench loss` (fused losses, one GPU or tp ranks)");
  bench->require_subcommand(1);
  auto options = std::make_shared<bench::LossBenchOptions>();
  CLI::App* loss = bench->add_subcommand(
      "loss",
      "forward + backward of the fused losses over bf16 logits: time, bandwidth as a share of the copy bandwidth, "
      "peak extra memory; --tp N compares the vocab-parallel variants on N GPUs");
  bench::add_loss_bench_options(*loss, *options);
  // Ranks the benchmark starts itself (--tp N outside a launcher) run this same subcommand.
  loss->callback([options, exit_code] {
    *exit_code = bench::run_loss_bench(*options, {"/proc/self/exe", "bench", "loss"});
  });
}

}  // namespace retort::apps
