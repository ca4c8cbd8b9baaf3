// Bus bandwidth of all-reduce and all-gather through retort's Communicator, one process per rank, measured the
// way nccl-tests does: sizes double from --min-bytes to --max-bytes; at each size a correctness check, a warm-up,
// then --iters back-to-back collectives, timed with CUDA events on the compute stream (nccl) or the host clock
// (gloo); the time is the mean per op, averaged over the ranks (nccl-tests' default "-a 1").
//   algBw = bytes / time (GB/s = 1e9 bytes/s)
//   busBw = algBw * 2(n-1)/n for all-reduce, algBw * (n-1)/n for all-gather
// where bytes is the all-reduce buffer, and for all-gather the gathered output (each rank sends bytes/n).
// bench/comm_bandwidth_torch.py measures torch.distributed the same way and writes the same JSON lines;
// bench/run_comm_bandwidth.sh runs both and prints the comparison.
//   retort launch --nproc 2 --exec -- build/bench/bench_comm_bandwidth --backend nccl --json out.jsonl
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/harness/bench_main.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/rank_reduction.h"
#include "bench/harness/step_timer.h"
#include "core/util/error.h"
#include "parallel/comm/rendezvous.h"

#ifdef RETORT_WITH_CUDA
#include <nccl.h>
#endif

using namespace retort;
using namespace retort::bench;

namespace {

#ifdef RETORT_WITH_CUDA
constexpr const char* kDefaultBackend = "nccl";
#else
constexpr const char* kDefaultBackend = "gloo";
#endif

struct Options {
  std::string backend = kDefaultBackend;
  std::string min_bytes = "1K";
  std::string max_bytes;  // default: 1G for nccl, 16M for gloo (CPU collectives over loopback TCP)
  int iters = 20;
  int warmup = 5;
  std::string dtype = "f32";
  std::string json;
  bool check = true;
  bool check_metadata = false;
};

// "4096", "1K", "64M", "1G", "1KiB", "2MB": binary multiples.
int64_t parse_size(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  RETORT_INPUT_CHECK(pos > 0 && pos <= 15, "'{}' is not a size (examples: 4096, 1K, 64M, 1G)", text);
  int64_t value = std::stoll(text.substr(0, pos));
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  int shift = 0;
  if (unit == "K") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else {
    RETORT_INPUT_CHECK(unit.empty() || unit == "B", "'{}': unknown unit '{}' (use K, M or G)", text, text.substr(pos));
  }
  RETORT_INPUT_CHECK(value > 0 && value <= (int64_t{1} << (40 - shift)), "size '{}' is out of range (1 to 1T)", text);
  return value << shift;
}

std::string size_label(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (int64_t{1} << 10) && bytes % (int64_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

struct Measurement {
  std::string collective;
  int64_t size = 0;   // the nominal size of this row
  int64_t bytes = 0;  // what moved: the all-reduce buffer or the all-gather output
  int64_t count = 0;  // elements in `bytes`
  double seconds = 0;
  double alg_bw = 0;  // GB/s
  double bus_bw = 0;  // GB/s
};

Measurement finish(std::string collective, int64_t size, int64_t bytes, int64_t count, double seconds, double factor) {
  Measurement m{std::move(collective), size, bytes, count, seconds};
  m.alg_bw = static_cast<double>(bytes) / seconds / 1e9;
  m.bus_bw = m.alg_bw * factor;
  return m;
}

void expect_value(const Tensor& t, int64_t index, double want, const std::string& what) {
  const double got = t.rows(index, 1).item();
  RETORT_CHECK(got == want, "{}: element {} is {}, expected {}", what, index, got, want);
}

int run(const Options& o) {
  const LaunchEnv env = read_launch_env();
  RETORT_INPUT_CHECK(o.backend == "nccl" || o.backend == "gloo", "--backend must be nccl or gloo, got '{}'", o.backend);
  const bool nccl = o.backend == "nccl";
#ifndef RETORT_WITH_CUDA
  RETORT_INPUT_CHECK(!nccl,
                     "--backend nccl needs a CUDA build of retort; this one was built without CUDA "
                     "(use --backend gloo, or configure with the CUDA toolkit present)");
#endif
  RETORT_INPUT_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be at least 1 and --warmup at least 0");
  const DType dtype = dtype_from_name(o.dtype);
  RETORT_INPUT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "--dtype must be f32 or bf16, got '{}'", o.dtype);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t min_bytes = parse_size(o.min_bytes);
  const int64_t max_bytes = parse_size(o.max_bytes.empty() ? (nccl ? "1G" : "16M") : o.max_bytes);
  RETORT_INPUT_CHECK(min_bytes <= max_bytes, "--min-bytes {} is above --max-bytes {}", o.min_bytes, o.max_bytes);

  GlooOptions gloo_options;
  gloo_options.check_metadata = o.check_metadata;
  auto world = connect_world(env, gloo_options);
  std::shared_ptr<Communicator> comm = world;
  Device device = Device::cpu();
  std::string nccl_version;
  if (nccl) {
    device = Device::cuda(env.local_rank);
    use_gpu(device, env.rank);
    comm = collective_group(world, device, o.check_metadata);
#ifdef RETORT_WITH_CUDA
    int version = 0;
    ncclGetVersion(&version);
    nccl_version = fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
#endif
  }
  const std::string device_name = bench::device_name(device);
  const int n = comm->size();
  const int rank = comm->rank();
  const double all_reduce_factor = 2.0 * (n - 1) / n, all_gather_factor = static_cast<double>(n - 1) / n;

  std::optional<JsonLinesWriter> json;
  if (rank == 0 && !o.json.empty()) json.emplace(o.json, JsonLinesWriter::Mode::Truncate, record_origin(device_name));
  if (rank == 0) {
    fmt::print("# retort {} bandwidth: {} ranks, {}, {} timed iterations after {} warm-up, {}{}\n", o.backend, n,
               o.dtype, o.iters, o.warmup, device_name, nccl_version.empty() ? "" : ", NCCL " + nccl_version);
    fmt::print("# all-gather size = the gathered output (each rank sends size/{}); GB/s = 1e9 bytes/s\n", n);
    fmt::print("# {:>8} | {:>10} {:>9} {:>9} | {:>10} {:>9} {:>9}\n", "", "all_reduce", "", "", "all_gather", "", "");
    fmt::print("# {:>8} | {:>10} {:>9} {:>9} | {:>10} {:>9} {:>9}\n", "size", "time(us)", "algbw", "busbw", "time(us)",
               "algbw", "busbw");
    std::fflush(stdout);
  }

  // Mean seconds per op over --iters back-to-back collectives after --warmup untimed ones, averaged over the
  // ranks (nccl-tests' default). NCCL runs on the communicator's stream, which waits for the compute stream
  // before each collective, and the compute stream waits for each collective in turn: events on the compute
  // stream therefore bracket all of them, host-side launch gaps included.
  StepTimer timer(device);
  auto mean_seconds = [&](const std::function<void()>& op) {
    for (int i = 0; i < o.warmup; ++i) op();
    // Line the ranks up so that no rank's clock starts while it waits for a late peer. The NCCL barrier returns
    // once this GPU has passed it, so the warm-up is off the GPU too.
    comm->barrier();
    const double ms = timer.ms([&] {
      for (int i = 0; i < o.iters; ++i) op();
    });
    return reduce_over_ranks(world.get(), {ms / 1e3 / o.iters}, ReduceOp::Sum)[0] / n;
  };
  auto emit = [&](const Measurement& m) {
    if (!json) return;
    json->write({{"framework", "retort"},
                 {"backend", o.backend},
                 {"collective", m.collective},
                 {"dtype", o.dtype},
                 {"nranks", n},
                 {"size", m.size},
                 {"bytes", m.bytes},
                 {"count", m.count},
                 {"time_us", m.seconds * 1e6},
                 {"alg_bw_gbps", m.alg_bw},
                 {"bus_bw_gbps", m.bus_bw},
                 {"iters", o.iters},
                 {"warmup", o.warmup},
                 {"device", device_name},
                 {"nccl_version", nccl_version}});
  };
  auto cell = [](const std::optional<Measurement>& m) {
    if (!m) return fmt::format("{:>10} {:>9} {:>9}", "-", "-", "-");
    return fmt::format("{:>10.2f} {:>9.2f} {:>9.2f}", m->seconds * 1e6, m->alg_bw, m->bus_bw);
  };

  for (int64_t size = min_bytes; size <= max_bytes; size *= 2) {
    std::optional<Measurement> reduce, gather;
    const int64_t count = size / elem;
    if (count >= 1) {
      if (o.check) {
        // Every rank holds rank + 1 everywhere; the sum over ranks is n(n+1)/2 (exact in bf16 for n <= 22).
        Tensor buffer = Tensor::full({count}, rank + 1, dtype, device);
        comm->all_reduce(buffer);
        const std::string what = fmt::format("all_reduce check at {}", size_label(size));
        for (int64_t i : {int64_t{0}, count / 2, count - 1}) expect_value(buffer, i, n * (n + 1) / 2.0, what);
      }
      // Zeros stay zeros however often they are summed, so the timed loop never overflows to inf.
      Tensor buffer = Tensor::zeros({count}, dtype, device);
      const double seconds = mean_seconds([&] { comm->all_reduce(buffer); });
      reduce = finish("all_reduce", size, count * elem, count, seconds, all_reduce_factor);
    }
    // As nccl-tests: each rank sends size / n bytes (the count rounded down to a multiple of n).
    const int64_t per_rank = count / n;
    if (per_rank >= 1) {
      Tensor input = Tensor::full({per_rank}, rank + 1, dtype, device);
      if (o.check) {
        const Tensor output = comm->all_gather(input, 0);
        const std::string what = fmt::format("all_gather check at {}", size_label(size));
        for (int r = 0; r < n; ++r) {
          expect_value(output, r * per_rank, r + 1, what);
          expect_value(output, (r + 1) * per_rank - 1, r + 1, what);
        }
      }
      const double seconds = mean_seconds([&] { comm->all_gather(input, 0); });
      gather = finish("all_gather", size, per_rank * n * elem, per_rank * n, seconds, all_gather_factor);
    }
    if (rank == 0) {
      if (reduce) emit(*reduce);
      if (gather) emit(*gather);
      fmt::print("  {:>8} | {} | {}\n", size_label(size), cell(reduce), cell(gather));
      std::fflush(stdout);
    }
    if (size > max_bytes / 2) break;  // no overflow past a huge --max-bytes
  }
  leave_together(device, comm.get());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      per_rank_usage("retort all-reduce / all-gather bus bandwidth (nccl-tests definitions)", "bench_comm_bandwidth")};
  app.add_option("--backend", o.backend, "nccl (CUDA tensors, CUDA builds only) or gloo (CPU tensors)")
      ->capture_default_str();
  app.add_option("--min-bytes", o.min_bytes, "smallest size (4096, 1K, 64M, 1G)")->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes,
                 "largest size; sizes double from the smallest (default 1G nccl, 16M gloo)");
  app.add_option("--iters", o.iters, "timed collectives per size")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed collectives per size before the timed ones")->capture_default_str();
  app.add_option("--dtype", o.dtype, "f32 or bf16")->capture_default_str();
  app.add_option("--json", o.json, "rank 0 writes one JSON line per collective and size here");
  app.add_flag("!--no-check", o.check, "skip the correctness check before timing each size");
  app.add_flag("--check-metadata", o.check_metadata,
               "exchange shape/dtype signatures before every collective (off: it would add a round trip)");
  CLI11_PARSE(app, argc, argv);

  return run_reporting_rank("bench_comm_bandwidth", [&] { return run(o); });
}
