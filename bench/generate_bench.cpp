// Generation throughput of retort's GPT with the KV cache: a randomly initialised model (GPT-2 small's shape by
// default; --family llama with --kv-heads and --intermediate for a Llama-shaped one), random prompts of one length,
// a fixed number of new tokens (no stop), at each batch size: the prefill time and the decode rate (tokens after the
// first, over all sequences, per second), and the node count of the CUDA graph each decode step replays (--graphs
// false: none, every kernel launched from the host). The bf16 inference copy of the weights is made once per batch
// size, outside the timed calls. bench/generate_bench_torch.py measures the PyTorch twin the same way;
// bench/run_generate_bench.sh runs both and writes the table.
// The framework name says which decode path ran: retort (the fused decode kernels, ops::decode_fusion, and CUDA
// graphs), with -unfused when RETORT_DECODE_FUSED=0, -no-pdl when RETORT_DECODE_PDL=0 (programmatic dependent launch
// off), -lanes-attention when RETORT_DECODE_ATTENTION=lanes (the CUDA-core cache attention instead of the
// tensor-core one), -one-launch when RETORT_DECODE_LAYERS=1 (every GPT block of a decode step in one persistent
// launch at every row count, ops::gpt_decode_layers_applies; by default it runs at 4 to 16 rows only), -per-op when
// RETORT_DECODE_LAYERS=0 (never), -no-graphs with --graphs false.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "bench/harness/json_lines.h"
#include "bench/harness/model_family.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/sample_stats.h"
#include "core/kernels/decode_kernels.h"
#include "core/ops/fusion.h"
#include "core/tensor/device_runtime.h"
#include "core/util/logging.h"
#include "parallel/generate/generator.h"
#include "parallel/models/gpt_model.h"

using namespace retort;

int main(int argc, char** argv) {
  GptConfig config;
  config.vocab_size = 50304;
  config.block_size = 1024;
  config.n_layer = 12;
  config.n_head = 12;
  config.n_embd = 768;
  std::string device_text = "cuda", dtype_arg = "bf16", batches_arg = "1,32", json_path, label = "gpt2-small";
  int64_t prompt_len = 128, new_tokens = 256, repeats = 3;
  double temperature = 0.0;
  bool graphs = true;
  CLI::App app{"retort generation benchmark (KV cache)"};
  app.add_option("--label", label)->capture_default_str();
  app.add_option("--device", device_text)->capture_default_str();
  app.add_option("--dtype", dtype_arg, "compute dtype: f32 or bf16")->capture_default_str();
  app.add_option("--batches", batches_arg, "comma-separated batch sizes")->capture_default_str();
  app.add_option("--prompt", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--new", new_tokens, "new tokens per sequence")->capture_default_str();
  app.add_option("--temperature", temperature, "0: greedy")->capture_default_str();
  app.add_option("--graphs", graphs,
                 "replay each decode step as a CUDA graph (on a GPU); false: launch every kernel from the host "
                 "(framework retort-no-graphs)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs after one warm-up; the median is reported")->capture_default_str();
  app.add_option("--vocab", config.vocab_size)->capture_default_str();
  app.add_option("--context", config.block_size)->capture_default_str();
  app.add_option("--layers", config.n_layer)->capture_default_str();
  app.add_option("--heads", config.n_head)->capture_default_str();
  app.add_option("--embd", config.n_embd)->capture_default_str();
  bench::add_family_options(app, config);
  app.add_option("--json", json_path, "append one JSON object per batch size to this file");
  CLI11_PARSE(app, argc, argv);
  // RETORT_LOG_LEVEL=debug shows whether (and why not) the decode step was captured in a CUDA graph.
  if (const char* level = std::getenv("RETORT_LOG_LEVEL")) setup_logging({.level = parse_log_level(level)});

  bench::apply_family_architecture(config);
  const Device device = Device::parse(device_text);
  GptModel model(config);
  model.to(device);
  model.initialize(1);
  std::vector<int64_t> batches;
  for (size_t at = 0; at <= batches_arg.size();) {
    const size_t comma = std::min(batches_arg.find(',', at), batches_arg.size());
    batches.push_back(std::stoll(batches_arg.substr(at, comma - at)));
    at = comma + 1;
  }

  const bench::RecordOrigin origin = bench::record_origin(bench::device_name(device));
  std::optional<bench::JsonLinesWriter> json;
  if (!json_path.empty()) json.emplace(json_path, bench::JsonLinesWriter::Mode::Append, origin);
  const bool fused = ops::decode_fusion() != ops::DecodeFusion::Off;
  const bool dependent_launch = kernels::decode_dependent_launch_enabled();
  const char* attention_choice = std::getenv("RETORT_DECODE_ATTENTION");
  const std::string decode_attention = attention_choice != nullptr ? attention_choice : "auto";
  const char* layers_choice = std::getenv("RETORT_DECODE_LAYERS");
  const std::string layers = layers_choice != nullptr ? layers_choice : "";
  const std::string framework =
      std::string("retort") + (fused ? "" : "-unfused") + (fused && layers == "1" ? "-one-launch" : "") +
      (fused && layers == "0" ? "-per-op" : "") + (fused && !dependent_launch ? "-no-pdl" : "") +
      (decode_attention == "lanes" ? "-lanes-attention" : "") + (graphs ? "" : "-no-graphs");
  fmt::print("{} {} on {}, {} compute: {} layers, {} heads, width {}, vocab {}, context {}; prompt {}, {} new tokens\n",
             framework, label, device.str(), dtype_arg, config.n_layer, config.n_head, config.n_embd, config.vocab_size,
             config.block_size, prompt_len, new_tokens);
  fmt::print("{:>6} {:>12} {:>16} {:>14} {:>12}\n", "batch", "prefill ms", "decode tokens/s", "ms per step",
             "graph nodes");
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  for (int64_t batch : batches) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch), std::vector<int32_t>(prompt_len));
    for (auto& p : prompts)
      for (auto& t : p) t = token(rng);
    generate::GenerationOptions options;
    options.max_new_tokens = new_tokens;
    options.compute_dtype = dtype_from_name(dtype_arg);
    options.sampling.temperature = temperature;
    options.cuda_graphs = graphs;
    // The bf16 weights once, as a caller generating many batches does (GenerationOptions::inference_model).
    options.inference_model = model.inference_copy(options.compute_dtype);
    std::vector<double> prefill, decode;
    int64_t graph_nodes = 0;
    for (int64_t run = 0; run <= repeats; ++run) {
      device_runtime::synchronize(device);
      const auto out = generate::generate_tokens(model, prompts, options);
      if (run == 0) continue;  // warm-up: the memory pool and cuBLAS's workspaces
      graph_nodes = out[0].decode_graph_nodes;
      prefill.push_back(out[0].prefill_seconds);
      double slowest = 0;
      for (const auto& s : out) slowest = std::max(slowest, s.decode_seconds);
      decode.push_back(slowest);
    }
    const double prefill_ms = 1e3 * bench::median(prefill), decode_s = bench::median(decode);
    const double tokens_per_s = static_cast<double>(batch * (new_tokens - 1)) / decode_s;
    const double ms_per_step = 1e3 * decode_s / static_cast<double>(new_tokens - 1);
    fmt::print("{:>6} {:>12.2f} {:>16.1f} {:>14.3f} {:>12}\n", batch, prefill_ms, tokens_per_s, ms_per_step,
               graph_nodes);
    const nlohmann::json row = bench::stamped({{"framework", framework},
                                               {"label", label},
                                               {"device", device.str()},
                                               {"dtype", dtype_arg},
                                               {"batch", batch},
                                               {"prompt", prompt_len},
                                               {"new_tokens", new_tokens},
                                               {"prefill_ms", prefill_ms},
                                               {"decode_tokens_per_s", tokens_per_s},
                                               {"ms_per_step", ms_per_step},
                                               {"temperature", temperature},
                                               {"graph_nodes", graph_nodes},
                                               {"decode_fused", fused},
                                               {"dependent_launch", dependent_launch},
                                               {"decode_attention", decode_attention}},
                                              origin);
    std::cout << row.dump() << std::endl;
    if (json) json->write(row);
  }
  return 0;
}
