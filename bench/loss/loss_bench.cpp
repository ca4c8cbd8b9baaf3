#include "bench/loss/loss_bench.h"

#include <algorithm>
#include <climits>

#include "bench/harness/rank_device.h"
#include "bench/loss/loss_measurement.h"
#include "bench/loss/loss_report.h"
#include "bench/loss/loss_setup.h"
#include "bench/loss/loss_variants.h"
#include "core/util/error.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/launch/launcher.h"

namespace retort::bench {
namespace {

// The variants to run: --variants, or all of those that apply at this tp.
std::vector<std::string> chosen_variants(const LossBenchOptions& o) {
  const std::vector<std::string> allowed = loss_variants_for(o.tp);
  if (o.variants.empty()) return allowed;
  for (const auto& v : o.variants)
    RETORT_INPUT_CHECK(std::find(allowed.begin(), allowed.end(), v) != allowed.end(),
                       "--variants {}: with --tp {} the variants are {}", v, o.tp, comma_joined(allowed));
  return o.variants;
}

// Not under a launcher: start the ranks, each running this same command.
int launch_ranks(const LossBenchOptions& o, const std::vector<std::string>& self) {
  std::vector<std::string> argv = self;
  const auto args = loss_bench_arguments(o);
  argv.insert(argv.end(), args.begin(), args.end());
  LaunchOptions launch;
  launch.nproc = o.tp;
  return launch_local(argv, launch).exit_code;
}

}  // namespace

int run_loss_bench(const LossBenchOptions& o, const std::vector<std::string>& self) {
  std::vector<LossKind> kinds;
  for (const auto& name : o.losses) kinds.push_back(parse_loss(name));
  RETORT_INPUT_CHECK(!kinds.empty() && !o.vocabs.empty(), "--losses and --vocab need at least one value each");
  for (int64_t v : o.vocabs)
    RETORT_INPUT_CHECK(v > 0 && v % o.tp == 0 && v <= INT32_MAX,
                       "--vocab {} must be positive and divide by --tp {} (each rank holds vocab / tp columns)", v,
                       o.tp);
  const std::vector<std::string> variants = chosen_variants(o);

  const LaunchEnv env = read_launch_env();
  if (o.tp > 1 && env.world_size == 1) return launch_ranks(o, self);
  RETORT_INPUT_CHECK(
      env.world_size == o.tp,
      "--tp {} needs exactly {} ranks, one per GPU, and this run has {}: use `retort bench loss --tp {}` "
      "or `retort launch --nproc {} -- ...`",
      o.tp, o.tp, env.world_size, o.tp, o.tp);

  const LossRun run = open_loss_run(o, env);
  LossReport report(o, run);
  LossMeasurement measurement(o, run, [&report](const LossResult& r) { report.add(r); });
  const int64_t copy_bytes = (o.copy_mib > 0 ? o.copy_mib : (run.device.is_cuda() ? 1024 : 64)) << 20;
  report.begin(copy_bytes, measurement.copy_gbps(copy_bytes));

  for (size_t i = 0; i < kinds.size(); ++i) {
    for (int64_t vocab : o.vocabs) report.compare_losses(measurement.run_group(kinds[i], o.losses[i], vocab, variants));
  }
  leave_together(run.device, run.comm.get());
  return 0;
}

}  // namespace retort::bench
