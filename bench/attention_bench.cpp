// Causal attention with grouped-query heads (ops::causal_attention, the Llama / Qwen attention): forward, and
// forward + backward, at Llama-like and GPT-2-like shapes with head size 64 and 128 by default, on random q, k, v,
// through each attention path asked for: "flash" (the fused kernels, taken by default for bf16 on CUDA) and
// "materialized" (the [T, T] probabilities, forced with RETORT_ATTENTION=materialized), so both come from one
// binary in one run. Reports the median time of each and the attention FLOP rate under the causal convention of
// FlashAttention's benchmarks: the forward's two products count 4 B H T^2 D / 2 (half the scores are masked), the
// backward's five products 2.5 times that, so forward + backward is 3.5 times the forward's count.
// bench/attention_bench_torch.py measures PyTorch's scaled_dot_product_attention the same way;
// bench/run_attention_bench.sh runs both and writes the table.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/sample_stats.h"
#include "core/autograd/grad_mode.h"
#include "core/kernels/kernels.h"
#include "core/ops/ops.h"
#include "core/tensor/device_runtime.h"

using namespace retort;

namespace {

struct Shape5 {
  int64_t batch, T, heads, kv_heads, head_dim;
};

// "4x2048x32x8x64,4x2048x32x8x128": batch x positions x query heads x key/value heads x head size.
std::vector<Shape5> parse_shapes(const std::string& text) {
  std::vector<Shape5> out;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ',')) {
    Shape5 s{};
    char x1 = 0, x2 = 0, x3 = 0, x4 = 0;
    std::stringstream one(item);
    one >> s.batch >> x1 >> s.T >> x2 >> s.heads >> x3 >> s.kv_heads >> x4 >> s.head_dim;
    if (one.fail() || x1 != 'x' || x2 != 'x' || x3 != 'x' || x4 != 'x')
      throw std::runtime_error(fmt::format("--shapes: '{}' is not BxTxHxKVxD (e.g. 4x2048x32x8x128)", item));
    out.push_back(s);
  }
  return out;
}

Tensor random_input(const Shape& shape, DType dtype, Device device, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = normal(rng);
  return Tensor::from_floats(v, shape, dtype, device);
}

// Median seconds of `repeats` timed runs of fn after one warm-up.
template <typename Fn>
double median_seconds(Device device, int64_t repeats, Fn&& fn) {
  std::vector<double> samples;
  for (int64_t run = 0; run <= repeats; ++run) {
    device_runtime::synchronize(device);
    bench::Stopwatch clock;
    fn();
    device_runtime::synchronize(device);
    if (run > 0) samples.push_back(clock.seconds());
  }
  return bench::median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_text = "cuda", dtype_arg = "bf16", shapes_arg = "4x2048x32x8x64,4x2048x32x8x128", json_path;
  std::string paths_arg = "flash,materialized";
  int64_t repeats = 10;
  CLI::App app{"retort causal attention benchmark (grouped-query heads)"};
  app.add_option("--device", device_text)->capture_default_str();
  app.add_option("--dtype", dtype_arg, "f32 or bf16")->capture_default_str();
  app.add_option("--shapes", shapes_arg, "comma-separated BxTxHxKVxD")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs after one warm-up; the median is reported")->capture_default_str();
  app.add_option("--paths", paths_arg,
                 "comma-separated attention paths to measure: flash (fused where it applies) and materialized")
      ->capture_default_str();
  app.add_option("--json", json_path, "append one JSON object per shape to this file");
  CLI11_PARSE(app, argc, argv);

  const Device device = Device::parse(device_text);
  const DType dtype = dtype_from_name(dtype_arg);
  const bench::RecordOrigin origin = bench::record_origin(bench::device_name(device));
  std::optional<bench::JsonLinesWriter> json;
  if (!json_path.empty()) json.emplace(json_path, bench::JsonLinesWriter::Mode::Append, origin);
  std::vector<std::string> paths;
  {
    std::stringstream all(paths_arg);
    std::string item;
    while (std::getline(all, item, ',')) {
      if (item != "flash" && item != "materialized")
        throw std::runtime_error(fmt::format("--paths: '{}' is neither flash nor materialized", item));
      paths.push_back(item);
    }
  }
  fmt::print("causal attention on {}, {}\n", device.str(), dtype_arg);
  fmt::print("{:>24} {:>13} {:>10} {:>10} {:>12} {:>12}\n", "BxTxHxKVxD", "path", "fwd ms", "fwd+bwd ms", "fwd TFLOP/s",
             "f+b TFLOP/s");
  std::mt19937 rng(0);
  for (const Shape5& s : parse_shapes(shapes_arg)) {
    Tensor q = random_input({s.batch, s.T, s.heads * s.head_dim}, dtype, device, rng);
    Tensor k = random_input({s.batch, s.T, s.kv_heads * s.head_dim}, dtype, device, rng);
    Tensor v = random_input({s.batch, s.T, s.kv_heads * s.head_dim}, dtype, device, rng);
    const Tensor dout = random_input({s.batch, s.T, s.heads * s.head_dim}, dtype, device, rng);
    const int H = static_cast<int>(s.heads), KV = static_cast<int>(s.kv_heads);
    for (const std::string& path : paths) {
      // ops::causal_attention reads the switch on every call.
      if (path == "materialized") {
        setenv("RETORT_ATTENTION", "materialized", 1);
      } else {
        unsetenv("RETORT_ATTENTION");
      }
      const bool fused = kernels::flash_attention_applies(q, k, v, s.head_dim);
      if (path == "flash" && !fused) {
        // The op would take the materialising kernels: measuring them under the flash label would be a duplicate.
        fmt::print("{:>24} {:>13} (the fused kernels do not take this device, dtype or head size)\n", "", "flash");
        continue;
      }
      const double forward_s = median_seconds(device, repeats, [&] {
        NoGradGuard no_grad;
        ops::causal_attention(q, k, v, H, KV);
      });
      for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
      const double both_s = median_seconds(device, repeats, [&] {
        for (Tensor* t : {&q, &k, &v}) t->zero_grad();
        ops::causal_attention(q, k, v, H, KV).backward(dout);
      });
      for (Tensor* t : {&q, &k, &v}) {
        t->zero_grad();
        t->set_requires_grad(false);
      }
      const double flops = 2.0 * static_cast<double>(s.batch * s.heads * s.T * s.T * s.head_dim);
      const std::string name = fmt::format("{}x{}x{}x{}x{}", s.batch, s.T, s.heads, s.kv_heads, s.head_dim);
      const std::string taken = fused ? "flash" : "materialized";
      fmt::print("{:>24} {:>13} {:>10.3f} {:>10.3f} {:>12.1f} {:>12.1f}\n", name, taken, 1e3 * forward_s, 1e3 * both_s,
                 flops / forward_s / 1e12, 3.5 * flops / both_s / 1e12);
      const nlohmann::json row = bench::stamped({{"framework", "retort-" + taken},
                                                 {"attention", taken},
                                                 {"device", device.str()},
                                                 {"dtype", dtype_arg},
                                                 {"shape", name},
                                                 {"batch", s.batch},
                                                 {"T", s.T},
                                                 {"heads", s.heads},
                                                 {"kv_heads", s.kv_heads},
                                                 {"head_dim", s.head_dim},
                                                 {"forward_ms", 1e3 * forward_s},
                                                 {"forward_backward_ms", 1e3 * both_s},
                                                 {"forward_tflops", flops / forward_s / 1e12},
                                                 {"forward_backward_tflops", 3.5 * flops / both_s / 1e12}},
                                                origin);
      std::cout << row.dump() << std::endl;
      if (json) json->write(row);
    }
    unsetenv("RETORT_ATTENTION");
  }
  return 0;
}
