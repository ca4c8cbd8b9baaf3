#pragma once
// What the loss benchmark prints and writes, on rank 0 only: the table on stdout, a row as each result comes
// (a long run shows progress), and the same results as JSON lines in --json, the fields that
// bench/loss_bench_torch.py writes for PyTorch so that bench/run_loss_bench.sh can join the two.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness/json_lines.h"
#include "bench/loss/loss_bench_options.h"
#include "bench/loss/loss_measurement.h"
#include "bench/loss/loss_setup.h"

namespace retort::bench {

class LossReport {
 public:
  // Opens --json on rank 0 (before anything is measured, so that a path that cannot be written fails at once).
  LossReport(const LossBenchOptions& options, const LossRun& run);

  // The table's header, with the copy bandwidth that the rows' share is of.
  void begin(int64_t copy_bytes, double copy_gbps);
  // One row and one JSON line.
  void add(const LossResult& r);
  // Every variant computes the same loss: one line with how far apart they are.
  void compare_losses(const std::vector<LossResult>& group);

 private:
  const LossBenchOptions& o_;
  const LossRun& run_;
  bool main_rank_;
  std::optional<JsonLinesWriter> json_;
  double copy_gbps_ = 0;
};

}  // namespace retort::bench
