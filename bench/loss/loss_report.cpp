#include "bench/loss/loss_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace retort::bench {
namespace {

std::string mib(double bytes) {
  return bytes < 0 ? "-" : fmt::format("{:.1f}", bytes / 1048576.0);
}

std::string size_text(int64_t bytes) {
  if (bytes % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  return fmt::format("{} MiB", bytes >> 20);
}

nlohmann::json loss_record(const LossResult& r, const LossRun& run, const LossBenchOptions& o, double copy_gbps) {
  const double seconds = r.median_ms / 1e3;
  const double gbps = r.oom ? 0 : r.bytes / seconds / 1e9;
  auto number = [](double v, bool known) { return known ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return nlohmann::json{{"framework", "retort"},
                        {"variant", r.variant},
                        {"loss", r.loss},
                        {"tokens", run.tokens},
                        {"vocab", r.vocab},
                        {"tp", run.tp},
                        {"dtype", "bf16"},
                        {"device", run.device_name},
                        {"status", r.oom ? "oom" : "ok"},
                        {"error", r.error},
                        {"time_ms", number(r.median_ms, !r.oom)},
                        {"time_ms_min", number(r.min_ms, !r.oom)},
                        {"time_ms_mean", number(r.mean_ms, !r.oom)},
                        {"bytes", r.bytes},
                        {"bandwidth_gbps", number(gbps, !r.oom)},
                        {"copy_bandwidth_gbps", copy_gbps},
                        {"bandwidth_share", number(gbps / copy_gbps, !r.oom)},
                        {"logits_bytes", r.logits_bytes},
                        {"peak_extra_bytes", number(r.extra_bytes, !r.oom && r.extra_bytes >= 0)},
                        {"extra_per_logits", number(r.extra_bytes / r.logits_bytes, !r.oom && r.extra_bytes >= 0)},
                        {"loss_value", number(r.loss_value, !r.oom)},
                        {"grad_norm", number(r.grad_norm, !r.oom)},
                        {"grad_max_diff", number(r.grad_max_diff, !r.oom && r.grad_max_diff >= 0)},
                        {"iters", o.iters},
                        {"warmup", o.warmup}};
}

}  // namespace

LossReport::LossReport(const LossBenchOptions& options, const LossRun& run)
    : o_(options), run_(run), main_rank_(run.rank == 0) {
  if (main_rank_ && !o_.json.empty())
    json_.emplace(o_.json, JsonLinesWriter::Mode::Truncate, record_origin(run_.device_name));
}

void LossReport::begin(int64_t copy_bytes, double copy_gbps) {
  copy_gbps_ = copy_gbps;
  if (!main_rank_) return;
  fmt::print(
      "# retort loss benchmark: forward + backward, {} tokens, bf16 logits, {} ({}){}; median of {} steps "
      "after {} warm-up\n",
      o_.tokens, run_.device_name, run_.device.str(),
      o_.tp > 1 ? fmt::format(", vocab split over {} ranks ({})", o_.tp, run_.comm->backend()) : "", o_.iters,
      o_.warmup);
  fmt::print(
      "# copy bandwidth {:.0f} GB/s ({} device-to-device, read + write bytes); bytes = logits read twice + "
      "gradient written once (+ teacher read twice for KL){}\n",
      copy_gbps, size_text(copy_bytes), o_.tp > 1 ? ", per rank; time = the slowest rank" : "");
  fmt::print("# extra = peak pool memory of one step above the inputs (gradient included){}\n",
             run_.device.is_cuda() ? ", per rank" : ": not measured on the CPU");
  fmt::print("# {:<4} {:>7} {:>3} {:<10} {:>9} {:>9} {:>8} {:>6} {:>10} {:>8} {:>12} {:>10}\n", "loss", "vocab", "tp",
             "variant", "time(ms)", "min(ms)", "GB/s", "share", "extra(MiB)", "x logits", "loss value",
             o_.tp > 1 ? "grad diff" : "grad norm");
  std::fflush(stdout);
}

void LossReport::add(const LossResult& r) {
  if (!main_rank_) return;
  if (json_) json_->write(loss_record(r, run_, o_, copy_gbps_));
  if (r.oom) {
    fmt::print("  {:<4} {:>7} {:>3} {:<10} {:>9}   {}\n", r.loss, r.vocab, run_.tp, r.variant, "OOM", r.error);
  } else {
    const double gbps = r.bytes / (r.median_ms / 1e3) / 1e9;
    const std::string check = o_.tp > 1 ? (r.grad_max_diff >= 0 ? fmt::format("{:.2e}", r.grad_max_diff) : "(ref)")
                                        : fmt::format("{:.4g}", r.grad_norm);
    fmt::print("  {:<4} {:>7} {:>3} {:<10} {:>9.3f} {:>9.3f} {:>8.0f} {:>6.2f} {:>10} {:>8} {:>12.6f} {:>10}\n", r.loss,
               r.vocab, run_.tp, r.variant, r.median_ms, r.min_ms, gbps, gbps / copy_gbps_, mib(r.extra_bytes),
               r.extra_bytes < 0 ? "-" : fmt::format("{:.3f}", r.extra_bytes / r.logits_bytes), r.loss_value, check);
  }
  std::fflush(stdout);
}

void LossReport::compare_losses(const std::vector<LossResult>& group) {
  if (!main_rank_ || group.empty()) return;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  int ok = 0;
  for (const auto& r : group) {
    if (r.oom) continue;
    lo = std::min(lo, r.loss_value);
    hi = std::max(hi, r.loss_value);
    ++ok;
  }
  if (ok > 1) {
    fmt::print("  {:<4} {:>7}     same loss over {} variants: {:.6f} .. {:.6f} (spread {:.2e})\n", group[0].loss,
               group[0].vocab, ok, lo, hi, hi - lo);
    std::fflush(stdout);
  }
}

}  // namespace retort::bench
