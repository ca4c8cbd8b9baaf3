// The cross-tokenizer losses (losses/chunk_distillation.h): the chunk-averaged KL and the gold loss, forward +
// backward, on one device at a realistic shape (4096 student positions, a Llama-3 student vocabulary of 128,256, a
// Qwen3 teacher vocabulary of 151,936, K = 32 teacher ids per position) with a realistic alignment: chunks of 1 to 3
// positions on each side (about one position in 20 in no chunk), a projection whose student ids map to 1 (70%), 2
// (20%), 3 (8%) or no (2%) teacher ids. Reports the median time of a whole call (the host-side chunk index
// included: a training step pays it), the medians of its forward and backward parts, and the peak extra device
// memory. bench/xtoken_loss_bench_torch.py implements
// the same formulas in PyTorch; bench/run_xtoken_loss_bench.sh runs both and writes the table.
//   build/bench/bench_xtoken_loss --json retort.jsonl                                       # one GPU
//   build/bench/bench_xtoken_loss --device cpu --positions 256 --student-vocab 4096 --teacher-vocab 5000
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/pool_meter.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/sample_stats.h"
#include "core/tensor/device_runtime.h"
#include "losses/chunk_distillation.h"

using namespace retort;

namespace {

// A small counter-based generator (splitmix64): 500 M logits in a second or two, where std::normal_distribution
// would take half a minute.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // Roughly normal (a sum of four uniforms), mean 0, standard deviation `sd`.
  float normalish(double sd) {
    return static_cast<float>((uniform() + uniform() + uniform() + uniform() - 2.0) * sd * 1.7320508);
  }
};

struct Problem {
  Tensor logits, labels;
  losses::ChunkTeacherTargets teacher;
  losses::ChunkAssignment chunks;
  losses::VocabProjection projection;
  losses::CommonIds common;
  int64_t teacher_rows = 0;
};

Problem make_problem(int64_t positions, int64_t vs, int64_t vt, int64_t k, DType dtype, Device device) {
  Random rng{42};
  Problem p;
  std::vector<int32_t> sc, tc;
  int32_t chunk = 0;
  while (static_cast<int64_t>(sc.size()) < positions) {
    if (rng.below(20) == 0) {
      sc.push_back(-1);
      tc.push_back(-1);
      continue;
    }
    const int64_t ns = 1 + rng.below(3), nt = 1 + rng.below(3);
    for (int64_t i = 0; i < ns && static_cast<int64_t>(sc.size()) < positions; ++i) sc.push_back(chunk);
    for (int64_t i = 0; i < nt; ++i) tc.push_back(chunk);
    ++chunk;
  }
  p.teacher_rows = static_cast<int64_t>(tc.size());
  p.chunks = {Tensor::from_ints(sc, {positions}, device), Tensor::from_ints(tc, {p.teacher_rows}, device), chunk};
  std::vector<float> x(static_cast<size_t>(positions * vs));
  for (float& v : x) v = rng.normalish(2.0);
  p.logits = Tensor::from_floats(x, {positions, vs}, dtype, device);
  x = {};
  std::vector<int32_t> labels(static_cast<size_t>(positions));
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.below(vs));
  p.labels = Tensor::from_ints(labels, {positions}, device);
  // Teacher: K distinct ids per position, log-probs of a peaked distribution holding 90% of the mass.
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<int64_t> last(static_cast<size_t>(vt), -1);
  for (int64_t t = 0; t < p.teacher_rows; ++t) {
    std::vector<double> raw;
    for (int64_t i = 0; i < k; ++i) {
      int64_t v;
      do v = rng.below(vt);
      while (last[static_cast<size_t>(v)] == t);
      last[static_cast<size_t>(v)] = t;
      ids.push_back(static_cast<int32_t>(v));
      raw.push_back(rng.normalish(2.0));
    }
    const double m = *std::max_element(raw.begin(), raw.end());
    double s = 0;
    for (double r : raw) s += std::exp(r - m);
    for (double r : raw) logprobs.push_back(static_cast<float>(r - m - std::log(s) + std::log(0.9)));
  }
  p.teacher = {Tensor::from_ints(ids, {p.teacher_rows, k}, device),
               Tensor::from_floats(logprobs, {p.teacher_rows, k}, DType::F32, device)};
  // Projection rows: 1 entry (70%), 2 (20%), 3 (8%) or none (2%), weights 0.9 * 0.1^i normalised.
  std::vector<int32_t> offsets{0}, proj_ids, common_s, common_t;
  std::vector<float> weights;
  std::vector<uint8_t> teacher_common(static_cast<size_t>(vt), 0);
  for (int64_t u = 0; u < vs; ++u) {
    const int64_t roll = rng.below(100);
    const int n = roll < 70 ? 1 : roll < 90 ? 2 : roll < 98 ? 3 : 0;
    double total = 0;
    for (int i = 0; i < n; ++i) total += 0.9 * std::pow(0.1, i);
    for (int i = 0; i < n; ++i) {
      proj_ids.push_back(static_cast<int32_t>(rng.below(vt)));
      weights.push_back(static_cast<float>(0.9 * std::pow(0.1, i) / total));
    }
    if (n == 1 && !teacher_common[static_cast<size_t>(proj_ids.back())]) {
      teacher_common[static_cast<size_t>(proj_ids.back())] = 1;
      common_s.push_back(static_cast<int32_t>(u));
      common_t.push_back(proj_ids.back());
    }
    offsets.push_back(static_cast<int32_t>(proj_ids.size()));
  }
  const int64_t nnz = static_cast<int64_t>(proj_ids.size()), np = static_cast<int64_t>(common_s.size());
  p.projection = {vs, vt, Tensor::from_ints(offsets, {vs + 1}, device), Tensor::from_ints(proj_ids, {nnz}, device),
                  Tensor::from_floats(weights, {nnz}, DType::F32, device)};
  p.common = {Tensor::from_ints(common_s, {np}, device), Tensor::from_ints(common_t, {np}, device)};
  return p;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_text = "cuda", dtype_arg = "bf16", losses_arg = "chunk_kl,gold", json_path;
  int64_t positions = 4096, vs = 128256, vt = 151936, k = 32, gold_top = 8192, repeats = 10;
  CLI::App app{"retort cross-tokenizer loss benchmark: chunk-averaged KL and gold loss, forward + backward"};
  app.add_option("--device", device_text)->capture_default_str();
  app.add_option("--dtype", dtype_arg, "student logits: f32 or bf16")->capture_default_str();
  app.add_option("--losses", losses_arg, "comma-separated: chunk_kl, gold")->capture_default_str();
  app.add_option("--positions", positions, "student positions")->capture_default_str();
  app.add_option("--student-vocab", vs)->capture_default_str();
  app.add_option("--teacher-vocab", vt)->capture_default_str();
  app.add_option("--topk", k, "teacher ids per position")->capture_default_str();
  app.add_option("--gold-top", gold_top, "the gold loss's m")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs after one warm-up; the median is reported")->capture_default_str();
  app.add_option("--json", json_path, "append one JSON object per loss to this file");
  CLI11_PARSE(app, argc, argv);

  const Device device = Device::parse(device_text);
  if (device.is_cuda()) bench::use_gpu(device, 0);
  const DType dtype = dtype_from_name(dtype_arg);
  const bench::RecordOrigin origin = bench::record_origin(bench::device_name(device));
  std::optional<bench::JsonLinesWriter> json;
  if (!json_path.empty()) json.emplace(json_path, bench::JsonLinesWriter::Mode::Append, origin);
  Problem p = make_problem(positions, vs, vt, k, dtype, device);
  fmt::print(
      "cross-tokenizer losses on {} ({}), {} student positions, {} teacher positions, {} chunks, V_s {}, V_t {}, "
      "K {}\n",
      bench::device_name(device), dtype_arg, positions, p.teacher_rows, p.chunks.chunk_count, vs, vt, k);
  fmt::print("{:>10} {:>12} {:>12} {:>12} {:>12} {:>14} {:>12}\n", "loss", "median ms", "min ms", "forward ms",
             "backward ms", "peak extra MiB", "loss value");
  p.logits.set_requires_grad();
  for (const std::string& name : split(losses_arg)) {
    losses::ChunkDistillationOptions o;
    if (name == "gold") {
      o.kind = losses::ChunkLossKind::kGold;
      o.gold_uncommon_top = gold_top;
    } else if (name != "chunk_kl") {
      throw std::runtime_error(fmt::format("--losses: unknown loss '{}' (chunk_kl or gold)", name));
    }
    std::vector<double> samples, forward_samples, backward_samples;
    double value = 0;
    double peak = -1;
    for (int64_t run = 0; run <= repeats; ++run) {
      p.logits.zero_grad();
      bench::PoolMeter meter(device);
      meter.start();
      device_runtime::synchronize(device);
      bench::Stopwatch clock;
      Tensor loss =
          losses::chunk_distillation_loss(p.logits, p.labels, p.teacher, p.chunks, p.projection, o, p.common).loss;
      // The split: the forward (host index and plan, uploads, forward passes; the op reads the loss on the host,
      // so it has waited for the device already) and the backward (one pass over the logits).
      device_runtime::synchronize(device);
      const double forward_ms = clock.ms();
      loss.backward();
      device_runtime::synchronize(device);
      if (run == 0) continue;
      samples.push_back(clock.ms());
      forward_samples.push_back(forward_ms);
      backward_samples.push_back(samples.back() - forward_ms);
      value = loss.item();
      peak = std::max(peak, meter.extra());
    }
    const bench::SampleSummary s = bench::summarize(samples);
    const double forward = bench::summarize(forward_samples).median;
    const double backward = bench::summarize(backward_samples).median;
    fmt::print("{:>10} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f} {:>14.1f} {:>12.6f}\n", name, s.median, s.min, forward,
               backward, peak < 0 ? -1.0 : peak / (1 << 20), value);
    if (json)
      json->write({{"framework", "retort"},
                   {"loss", name},
                   {"device", device.str()},
                   {"dtype", dtype_arg},
                   {"positions", positions},
                   {"teacher_positions", p.teacher_rows},
                   {"chunks", p.chunks.chunk_count},
                   {"student_vocab", vs},
                   {"teacher_vocab", vt},
                   {"topk", k},
                   {"gold_top", gold_top},
                   {"time_ms", s.median},
                   {"min_ms", s.min},
                   {"forward_ms", forward},
                   {"backward_ms", backward},
                   {"peak_extra_bytes", peak},
                   {"loss_value", value}});
  }
  return 0;
}
