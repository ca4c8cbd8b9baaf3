#pragma once
// Measures the loss variants, per (loss, vocab, variant):
//   time       median (and min, mean) of --iters steps after --warmup, each timed by StepTimer; a step is the
//              loss op and its backward (the closure that loss.backward() runs for logits that are not a leaf),
//              the gradient allocated inside the step; over ranks, the slowest rank's
//   bytes      what must move: the logits read twice + the gradient written once (for KL the teacher read twice
//              too), set against the device-to-device copy bandwidth measured at start
//   memory     one more step after the timed ones, under PoolMeter: the peak above the inputs, gradient included
//   checks     the loss value, the gradient's global norm, and (tp > 1) the largest |difference| between each
//              variant's local gradient and the first variant's
// An out-of-memory error in a variant (or its inputs) is a result marked oom, and the benchmark goes on: ranks
// are symmetric, so all of them fail at the same allocation, and they agree on it before going on.
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness/pool_meter.h"
#include "bench/harness/step_timer.h"
#include "bench/loss/loss_bench_options.h"
#include "bench/loss/loss_inputs.h"
#include "bench/loss/loss_setup.h"

namespace retort::bench {

struct LossResult {
  std::string loss, variant;
  int64_t vocab = 0;
  bool oom = false;
  std::string error;
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  double bytes = 0;         // per rank: what must move
  double logits_bytes = 0;  // per rank: one logits-sized buffer
  double extra_bytes = -1;  // per rank, the largest; -1: not measured
  double loss_value = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double grad_max_diff = -1;  // vs the first variant; -1: none
};

class LossMeasurement {
 public:
  // `report` sees every result as soon as it is measured, on every rank.
  LossMeasurement(const LossBenchOptions& options, const LossRun& run, std::function<void(const LossResult&)> report);

  // Device-to-device copy bandwidth in GB/s over a `bytes` buffer, counting the bytes read and written (as the
  // loss bytes do); over ranks, the slowest rank's.
  double copy_gbps(int64_t bytes);

  // Every variant of one (loss, vocab), in order.
  std::vector<LossResult> run_group(LossKind kind, const std::string& loss_name, int64_t vocab,
                                    const std::vector<std::string>& variants);

 private:
  // Times `variant` into r; `reference` is the first variant's gradient on the host (tp > 1, --check-grads).
  void measure(LossKind kind, const std::string& variant, const LossInputs& in, LossResult& r,
               std::optional<Tensor>& reference);

  const LossBenchOptions& o_;
  const LossRun& run_;
  std::function<void(const LossResult&)> report_;
  StepTimer timer_;
  PoolMeter meter_;
  Tensor one_;  // d loss / d loss
};

}  // namespace retort::bench
