// TP-REKLS optimizer step time, eigendecompositions per step and optimizer state per rank, one process per rank
// under `retort launch`; bench/rekls_anchor_torch.py measures the anchor algorithm (optimizer.md's TpRekls:
// gather, 4 eigh per parameter on every rank, redundant full-matrix work) on the same parameters, and
// bench/run_rekls_bench.sh runs both and compares them, including the update each gives after --check-steps
// steps from the same weights and gradients.
//   retort launch --nproc 2 --exec -- build/bench/bench_rekls --device cuda --json out.jsonl
// Parameters: "ROWSxCOLS:PD*COUNT" items, comma-separated; PD is the partition dim (0 rows, 1 columns, -1
// replicated). Weights and gradients come from an integer hash of (seed, index) that the PyTorch side computes
// bit for bit, so both start from the same numbers. Defaults: eps 1e-3 with gradients of 1e-3, where float32
// REKLS is well conditioned (tests/optim/test_rekls_reference.cpp explains why that matters for a comparison).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/harness/bench_main.h"
#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/rank_reduction.h"
#include "bench/harness/sample_stats.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"
#include "optim/rekls/tp_rekls.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/tp/sharding.h"

using namespace retort;
using namespace retort::bench;

namespace {

struct Options {
  std::string device = "cuda";
  std::string params;  // default depends on the device
  int steps = 5, warmup = 2, check_steps = 2;
  double lr = 1e-2, eps = 1e-3, grad_scale = 1e-3;
  int check_samples = 2048;
  std::string json;
};

struct ParamSpec {
  int64_t rows, cols;
  int partition_dim;
};

std::vector<ParamSpec> parse_params(const std::string& text) {
  std::vector<ParamSpec> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    long long rows = 0, cols = 0, count = 1;
    int pd = 0;
    const int read = std::sscanf(item.c_str(), "%lldx%lld:%d*%lld", &rows, &cols, &pd, &count);
    RETORT_INPUT_CHECK(read == 4 && rows > 0 && cols > 0 && count > 0 && pd >= -1 && pd <= 1,
                       "--params item '{}' is not ROWSxCOLS:PD*COUNT (e.g. 4096x1024:0*4; PD 0, 1 or -1)", item);
    for (long long i = 0; i < count; ++i) out.push_back({rows, cols, pd});
    start = end + 1;
  }
  RETORT_INPUT_CHECK(!out.empty(), "--params names no parameter");
  return out;
}

// Uniform in [-scale, scale) from a 32-bit mix of (seed, index): the PyTorch side computes the same bits.
std::vector<float> hashed_values(int64_t count, uint32_t seed, double scale) {
  std::vector<float> out(static_cast<size_t>(count));
  const uint32_t salt = seed * 0x9E3779B9u;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t h = static_cast<uint32_t>(i) ^ salt;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    out[static_cast<size_t>(i)] = static_cast<float>((static_cast<double>(h) / 4294967296.0 - 0.5) * 2.0 * scale);
  }
  return out;
}

uint32_t weight_seed(size_t p) {
  return static_cast<uint32_t>(1000 + p);
}
uint32_t grad_seed(size_t p, int step) {
  return static_cast<uint32_t>(2000 + 100 * p + step);
}

struct Run {
  nn::NamedTensors params;
  std::vector<Tensor> initial_full;  // host, full
};

ShardingSpec spec_of(const ParamSpec& p, const std::shared_ptr<Communicator>& group) {
  ShardingSpec spec;
  spec.partition_dim = p.partition_dim;
  spec.group = group;
  return spec;
}

Run make_params(const std::vector<ParamSpec>& specs, const std::shared_ptr<Communicator>& group, Device device) {
  Run run;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    Tensor full = Tensor::from_floats(hashed_values(s.rows * s.cols, weight_seed(i), 0.02), {s.rows, s.cols});
    const ShardingSpec spec = spec_of(s, group);
    Tensor local = tp::shard_of(full, spec, group->rank(), group->size()).to(device).clone();
    local.set_requires_grad(true);
    local.set_sharding(spec);
    run.params.emplace_back(fmt::format("p{}", i), local);
    run.initial_full.push_back(full);
  }
  return run;
}

void set_gradients(Run& run, const std::vector<ParamSpec>& specs, int step, double scale, Device device) {
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor& p = run.params[i].second;
    const ParamSpec& s = specs[i];
    Tensor full = Tensor::from_floats(hashed_values(s.rows * s.cols, grad_seed(i, step), scale), {s.rows, s.cols});
    p.set_grad(tp::shard_of(full, p.sharding(), p.sharding().group->rank(), p.sharding().group->size()).to(device));
  }
}

int run(const Options& o) {
  const LaunchEnv env = read_launch_env();
  auto world = connect_world(env, GlooOptions{});
  std::shared_ptr<Communicator> comm = world;
  Device device = Device::cpu();
  RETORT_INPUT_CHECK(o.device == "cpu" || o.device == "cuda", "--device must be cpu or cuda, got '{}'", o.device);
  if (o.device == "cuda") {
    device = Device::cuda(env.local_rank);
    use_gpu(device, env.rank);
    if (world->size() > 1) comm = collective_group(world, device);
  }
  const std::string device_name = bench::device_name(device);
  const std::string params_text =
      !o.params.empty() ? o.params : (device.is_cuda() ? "4096x1024:0*4,1024x4096:1*4" : "256x64:0*4,64x256:1*4");
  const std::vector<ParamSpec> specs = parse_params(params_text);
  optim::ReklsOptions options;
  options.eps = o.eps;

  // Timing: the same gradients every step (the step's cost does not depend on their values).
  Run timed = make_params(specs, comm, device);
  optim::TpRekls optimizer({{"all", timed.params, 0.01}}, options, comm);
  set_gradients(timed, specs, 1, o.grad_scale, device);
  std::vector<double> seconds;
  int64_t eigh_per_step = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    // The host clock between two synchronisations: the step's host work (eigh on the CPU, collectives) counts.
    device_runtime::synchronize(device);
    world->barrier();
    const Stopwatch watch;
    optimizer.step(o.lr);
    device_runtime::synchronize(device);
    const double slowest = slowest_rank(world.get(), watch.seconds());
    eigh_per_step = static_cast<int64_t>(
        reduce_over_ranks(world.get(), {static_cast<double>(optimizer.eigh_calls_last_step())}, ReduceOp::Sum)[0]);
    if (s >= o.warmup) seconds.push_back(slowest);
  }
  double state_bytes = 0;
  for (const auto& [name, t] : optimizer.state().tensors) state_bytes += static_cast<double>(t.nbytes());
  const double most_state = slowest_rank(world.get(), state_bytes);  // the largest rank's state
  const SampleSummary step_time = summarize(seconds);

  // The update check: fresh weights and state, --check-steps steps with per-step gradients, then samples of the
  // full W - W0 of every parameter.
  Run checked = make_params(specs, comm, device);
  optim::TpRekls check_optimizer({{"all", checked.params, 0.01}}, options, comm);
  for (int step = 1; step <= o.check_steps; ++step) {
    set_gradients(checked, specs, step, o.grad_scale, device);
    check_optimizer.step(o.lr);
  }
  nlohmann::json check = nlohmann::json::object();
  for (size_t i = 0; i < specs.size(); ++i) {
    const Tensor& p = checked.params[i].second;
    const std::vector<double> full = tp::gather_full(p, p.sharding()).to_doubles();
    const std::vector<double> start = checked.initial_full[i].to_doubles();
    const int64_t count = static_cast<int64_t>(full.size());
    const int64_t stride = std::max<int64_t>(1, count / o.check_samples);
    std::vector<double> samples;
    double largest = 0;
    for (int64_t j = 0; j < count; ++j) largest = std::max(largest, std::abs(full[j] - start[j]));
    for (int64_t j = 0; j < count; j += stride) samples.push_back(full[j] - start[j]);
    check[checked.params[i].first] = {{"max_abs_update", largest}, {"stride", stride}, {"samples", samples}};
  }

  if (env.rank == 0) {
    const int tp = world->size();
    std::printf(
        "retort TP-REKLS on %d x %s, params %s: step %.3f ms (mean of %d; best %.3f ms), %lld eigh per "
        "step over the group, optimizer state %.1f MiB per rank\n",
        tp, device_name.c_str(), params_text.c_str(), 1e3 * step_time.mean, o.steps, 1e3 * step_time.min,
        static_cast<long long>(eigh_per_step), most_state / (1 << 20));
    if (!o.json.empty()) {
      JsonLinesWriter(o.json, JsonLinesWriter::Mode::Append, record_origin(device_name))
          .write({{"impl", "retort"},
                  {"device", device_name},
                  {"tp", tp},
                  {"params", params_text},
                  {"step_ms", 1e3 * step_time.mean},
                  {"best_step_ms", 1e3 * step_time.min},
                  {"steps", o.steps},
                  {"eigh_per_step", eigh_per_step},
                  {"state_bytes_per_rank", most_state},
                  {"check_steps", o.check_steps},
                  {"check", check}});
    }
  }
  leave_together(device, world.get());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{per_rank_usage("TP-REKLS optimizer step time, eigh count and state memory", "bench_rekls")};
  app.add_option("--device", o.device, "cpu (Gloo) or cuda (NCCL, one GPU per rank)")->capture_default_str();
  app.add_option("--params", o.params,
                 "ROWSxCOLS:PD*COUNT items, comma-separated (default cuda: 4096x1024:0*4,1024x4096:1*4; cpu: "
                 "256x64:0*4,64x256:1*4)");
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--check-steps", o.check_steps, "steps of the update check")->capture_default_str();
  app.add_option("--check-samples", o.check_samples, "sampled entries of each update")->capture_default_str();
  app.add_option("--lr", o.lr)->capture_default_str();
  app.add_option("--eps", o.eps)->capture_default_str();
  app.add_option("--grad-scale", o.grad_scale, "gradients are uniform in [-scale, scale)")->capture_default_str();
  app.add_option("--json", o.json, "rank 0 appends one JSON line here");
  CLI11_PARSE(app, argc, argv);
  return run_reporting_rank("bench_rekls", [&] { return run(o); });
}
