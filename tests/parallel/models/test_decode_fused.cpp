// The fused decode path of the models (ops::decode_fusion_applies; core/ops/fusion.h's switch): over few rows each
// gpt block runs as four fused products and the attention, each Llama-family layer as six and the attention, the
// embedding as one lookup and the final norm with the LM head as one product.
//   - It is taken: a decode step dispatches only the fused kernels (counted with the op profiler), and no product
//     or norm of the unfused path;
//   - its logits follow the unfused path's within the rounding of the compute dtype, at every step of a prefill and
//     several decode steps (gpt tied and untied, with and without biases; qwen2 with q/k/v biases; qwen3 with grouped
//     heads and per-head q/k norms), f32 and bf16;
//   - decode_step and forward_cached with one new token stay equal bit for bit with it;
//   - greedy tokens equal the unfused path's wherever the unfused top-two logits are not near a tie (bf16 rounds
//     differently in the two paths, so the runs may part at a near-tie; in f32 they never meet one here).
// On the CPU (DecodeFusion::Everywhere: the CPU kernels are the reference) and on the GPU in bf16, the mode a GPU
// decode takes by default (skipped without a GPU), where graph decoding must also give the tokens of eager
// decoding, with programmatic dependent launch on and off.
// With RETORT_DECODE_LAYERS=1, GPT blocks the one-launch kernel takes (heads of 64, width 256:
// ops::gpt_decode_layers_applies) decode a step as one gpt_decode_layers dispatch for every block, through the same
// checks, on the CPU (its reference kernel) and on the GPU; without the setting the GPU takes it at 4 to 16 rows and
// the CPU never, and RETORT_DECODE_LAYERS=0 turns it off. Past the fused rows, GPT blocks leave their output
// projections as partial sums for the norm after them (ops::decode_partial_products_apply), checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/kernels/decode_kernels.h"
#include "core/ops/decode_ops.h"
#include "core/ops/fusion.h"
#include "core/profile/op_profiler.h"
#include "parallel/generate/generator.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/generate/decode_script_test_support.h"

namespace retort {
namespace {

using decode_testing::kPrompts;
using decode_testing::run_script;

using ops::DecodeFusion;
using ops::DecodeFusionScope;

GptConfig gpt_config(bool tied, bool bias) {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.tie_weights = tied;
  c.bias = bias;
  c.init_std = 0.2;
  return c;
}

GptConfig llama_config(const std::string& family) {
  GptConfig c = gpt_config(false, false);
  c.family = family;
  c.norm = "rmsnorm";
  c.n_kv_head = 2;
  c.intermediate_size = 48;
  c.qk_norm = family == "qwen3";
  c.qkv_bias = family == "qwen2";
  return c;
}

struct Case {
  std::string name;
  GptConfig config;
};

std::vector<Case> cases() {
  return {{"gpt tied", gpt_config(true, true)},
          {"gpt untied, no bias", gpt_config(false, false)},
          {"qwen2", llama_config("qwen2")},
          {"qwen3", llama_config("qwen3")}};
}

Device device_of(const GptModel& model) {
  return model.named_parameters().front().second.device();
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The fused path against the unfused one, and decode_step against forward_cached under the fused path.
void check_model(const GptModel& model, DType dtype, DecodeFusion fused_mode, double tolerance,
                 const std::vector<std::vector<int32_t>>& prompts = kPrompts) {
  std::vector<std::vector<float>> unfused, fused, fused_steps;
  {
    const DecodeFusionScope off(DecodeFusion::Off);
    unfused = run_script(model, dtype, 5, false, prompts);
  }
  {
    const DecodeFusionScope on(fused_mode);
    fused = run_script(model, dtype, 5, false, prompts);
    fused_steps = run_script(model, dtype, 5, true, prompts);
  }
  ASSERT_EQ(fused.size(), unfused.size());
  bool any_difference = false;
  for (size_t call = 0; call < unfused.size(); ++call) {
    EXPECT_LE(relative_error(fused[call], unfused[call]), tolerance) << "call " << call;
    EXPECT_EQ(fused_steps[call], fused[call]) << "decode_step and forward_cached part at call " << call;
    any_difference = any_difference || fused[call] != unfused[call];
  }
  // In f32 the two orders of summation show in the last bits (bf16 logits can round to the same values throughout);
  // that the path is taken at all is AStepDispatchesOnlyTheFusedKernels's.
  if (dtype == DType::F32) {
    EXPECT_TRUE(any_difference) << "every logit equals the unfused path's";
  }
}

// The dispatches of one decode step of B rows (three by default), by kernel name.
std::map<std::string, int64_t> step_dispatches(const GptModel& model, DType dtype, int64_t B = 3) {
  NoGradGuard no_grad;
  const Device device = device_of(model);
  generate::KvCache cache(model, B, model.config().block_size, dtype, device);
  const std::vector<int64_t> ones(static_cast<size_t>(B), 1);
  std::vector<int32_t> prompt, next;
  for (int64_t b = 0; b < B; ++b) prompt.push_back(static_cast<int32_t>(1 + b % 3)), next.push_back(4 + b % 3);
  model.forward_cached(Tensor::from_ints(prompt, {B, 1}, device), ones, cache, dtype);
  profile::start_op_profile(device);
  model.decode_step(Tensor::from_ints(next, {B, 1}, device),
                    Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(B), 1), {B, 1}, device),
                    model.rope_frequencies(device), cache, dtype);
  const profile::OpProfile profile = profile::stop_op_profile();
  std::map<std::string, int64_t> calls;
  for (const auto& op : profile.ops) calls[op.name] += op.calls;
  return calls;
}

TEST(DecodeFused, AStepDispatchesOnlyTheFusedKernels) {
  const DecodeFusionScope everywhere(DecodeFusion::Everywhere);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptModel model(c.config);
    model.initialize(3);
    const auto calls = step_dispatches(model, DType::F32);
    const int64_t layers = c.config.n_layer;
    const bool llama = c.config.llama_family();
    // gpt: q|k|v, projection, fc, MLP projection; Llama: q, k, v, o, gate|up, down; and the head.
    EXPECT_EQ(calls.count("small_m_linear") ? calls.at("small_m_linear") : 0, (llama ? 6 : 4) * layers + 1);
    EXPECT_EQ(calls.count("embedding_sum") ? calls.at("embedding_sum") : 0, 1);
    for (const char* unfused : {"gemm", "linear_forward", "layer_norm_forward", "add_layer_norm_forward",
                                "add_rms_norm_forward", "embedding_forward", "swiglu_forward"})
      EXPECT_EQ(calls.count(unfused), 0u) << unfused;
    // qwen3's per-head q/k norms stay separate kernels.
    EXPECT_EQ(calls.count("rms_norm_forward") ? calls.at("rms_norm_forward") : 0, c.config.qk_norm ? 2 * layers : 0);
  }
  // Switched off, the same step runs the unfused kernels.
  const DecodeFusionScope off(DecodeFusion::Off);
  GptModel model(gpt_config(true, true));
  model.initialize(3);
  EXPECT_EQ(step_dispatches(model, DType::F32).count("small_m_linear"), 0u);
}

// A layer whose later products read rows too wide for one fused launch (here the MLP's down projection, 24,608 floats
// against the CUDA-core kernel's 24,576) decodes on the unfused path instead of failing; the LM head, which reads
// x's width, stays fused. A model wider than 1024 fuses single rows only.
TEST(DecodeFused, WideRowsAndWideModelsTakeTheUnfusedPath) {
  const DecodeFusionScope everywhere(DecodeFusion::Everywhere);
  const Tensor x = Tensor::zeros({4, 1, 32});
  EXPECT_TRUE(ops::decode_fusion_applies(x, DType::F32));
  EXPECT_TRUE(ops::decode_fusion_applies(x, DType::F32, 24576));
  EXPECT_FALSE(ops::decode_fusion_applies(x, DType::F32, 24577));
  EXPECT_TRUE(ops::decode_fusion_applies(x, DType::BF16, 24577));  // half the bytes a value
  // Up to 16 rows for a model up to 1024 wide, 1 row for a wider one (measured: docs/benchmarks.md).
  EXPECT_TRUE(ops::decode_fusion_applies(Tensor::zeros({16, 1, 1024}), DType::F32));
  EXPECT_FALSE(ops::decode_fusion_applies(Tensor::zeros({17, 1, 1024}), DType::F32));
  EXPECT_TRUE(ops::decode_fusion_applies(Tensor::zeros({1, 1, 2048}), DType::F32));
  EXPECT_FALSE(ops::decode_fusion_applies(Tensor::zeros({2, 1, 2048}), DType::F32));
  GptConfig config = llama_config("llama");
  config.n_layer = 1;
  config.intermediate_size = 24608;
  GptModel model(config);
  model.initialize(3);
  const auto calls = step_dispatches(model, DType::F32);
  EXPECT_EQ(calls.count("small_m_linear") ? calls.at("small_m_linear") : 0, 1);  // the head
  EXPECT_EQ(calls.count("swiglu_forward") ? calls.at("swiglu_forward") : 0, 1);
}

TEST(DecodeFused, LogitsFollowTheUnfusedPathOnCpu) {
  for (const Case& c : cases()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dtype)));
      GptModel model(c.config);
      model.initialize(7);
      check_model(model, dtype, DecodeFusion::Everywhere, dtype == DType::F32 ? 1e-5 : 3e-2);
    }
  }
}

// Greedy generation with the fused and the unfused path: the same tokens wherever the unfused path's best logit
// leads the next by `margin` (bf16 keeps 8 bits: the two paths round differently and may part at a near-tie), and
// at least `min_compared` tokens compared.
void check_greedy_tokens(const GptModel& model, DType dtype, DecodeFusion fused_mode, double margin,
                         int64_t min_compared) {
  generate::GenerationOptions options;
  options.max_new_tokens = 14;
  options.compute_dtype = dtype;
  options.sampling.temperature = 0.0;
  std::vector<generate::GeneratedSequence> fused, unfused;
  {
    const DecodeFusionScope on(fused_mode);
    fused = generate::generate_tokens(model, kPrompts, options);
  }
  {
    const DecodeFusionScope off(DecodeFusion::Off);
    unfused = generate::generate_tokens(model, kPrompts, options);
  }
  int64_t compared = 0;
  const DecodeFusionScope off(DecodeFusion::Off);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<int32_t> sequence = kPrompts[i];
    for (size_t t = 0; t < unfused[i].tokens.size() && t < fused[i].tokens.size(); ++t) {
      // The unfused logits at this position, from the full forward of the sequence so far.
      NoGradGuard no_grad;
      const int64_t T = static_cast<int64_t>(sequence.size());
      const std::vector<float> all =
          model.forward(Tensor::from_ints(sequence, {1, T}, device_of(model)), dtype).to_floats();
      std::vector<float> row(all.end() - model.config().vocab_size, all.end());
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
      if (row[0] - row[1] < margin) break;
      EXPECT_EQ(fused[i].tokens[t], unfused[i].tokens[t]) << "prompt " << i << ", new token " << t;
      ++compared;
      sequence.push_back(unfused[i].tokens[t]);
    }
  }
  EXPECT_GE(compared, min_compared) << "too few tokens away from a tie to compare";
}

TEST(DecodeFused, GreedyTokensEqualTheUnfusedOnesOnCpu) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptConfig config = c.config;
    config.init_std = 0.3;  // large weights: the top two logits are far apart
    GptModel model(config);
    model.initialize(11);
    check_greedy_tokens(model, DType::F32, DecodeFusion::Everywhere, 1e-3, 30);
    check_greedy_tokens(model, DType::BF16, DecodeFusion::Everywhere, 0.1, 15);
  }
}

TEST(DecodeFused, GpuBf16FollowsTheUnfusedPath) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptModel model(c.config);
    model.initialize(7);
    model.to(Device::cuda(0));
    check_model(model, DType::BF16, DecodeFusion::Gpu, 3e-2);
    // The inference copy (bf16 weights stored once) is what generation runs: the same bits as the model.
    const auto copy = model.inference_copy(DType::BF16);
    const DecodeFusionScope gpu(DecodeFusion::Gpu);
    EXPECT_EQ(run_script(*copy, DType::BF16, 3, true), run_script(model, DType::BF16, 3, true));
  }
}

// A vocabulary that is not a multiple of 8 (as GPT-2's 50,257 ids): on the GPU in bf16 the unfused decode head
// multiplies by the head's rows padded with zeros (ops::PaddedRowsCache) and keeps vocab_size logits. Its logits
// against the CPU's float32 ones, tied and untied, and the fused head against it.
TEST(DecodeFused, GpuVocabularyNotAMultipleOfEight) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    GptConfig config = gpt_config(tied, true);
    config.vocab_size = 61;
    GptModel cpu(config);
    cpu.initialize(7);
    GptModel gpu(config);
    gpu.initialize(7);
    gpu.to(Device::cuda(0));
    const DecodeFusionScope off(DecodeFusion::Off);
    const std::vector<std::vector<float>> want = run_script(cpu, DType::F32, 4, true);
    const auto copy = gpu.inference_copy(DType::BF16);
    const std::vector<std::vector<float>> got = run_script(*copy, DType::BF16, 4, true);
    ASSERT_EQ(got.size(), want.size());
    for (size_t call = 0; call < want.size(); ++call) {
      ASSERT_EQ(got[call].size(), want[call].size()) << "call " << call;
      EXPECT_EQ(want[call].size() % 61, 0u);
      EXPECT_LE(relative_error(got[call], want[call]), 3e-2) << "call " << call;
    }
    check_model(gpu, DType::BF16, DecodeFusion::Gpu, 3e-2);
  }
}

TEST(DecodeFused, GpuGreedyTokensEqualTheUnfusedOnes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptConfig config = c.config;
    config.init_std = 0.3;
    GptModel model(config);
    model.initialize(11);
    model.to(Device::cuda(0));
    check_greedy_tokens(model, DType::BF16, DecodeFusion::Gpu, 0.1, 15);
  }
}

// Twelve sequences at once: past 4 rows the GPU's bf16 products run on the tensor cores (small_m_linear_mma.cu),
// through the same checks, and graph decoding gives eager decoding's tokens.
TEST(DecodeFused, GpuTwelveSequencesTakeTheTensorCoreProducts) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t b = 0; b < 12; ++b) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 1 + b % 7; ++i) prompt.push_back((b * 11 + i * 5 + 1) % 64);
    prompts.push_back(prompt);
  }
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptModel model(c.config);
    model.initialize(7);
    model.to(Device::cuda(0));
    check_model(model, DType::BF16, DecodeFusion::Gpu, 3e-2, prompts);
    const DecodeFusionScope gpu(DecodeFusion::Gpu);
    generate::GenerationOptions options;
    options.max_new_tokens = 8;
    options.compute_dtype = DType::BF16;
    generate::GenerationOptions eager = options;
    eager.cuda_graphs = false;
    std::vector<std::vector<int32_t>> a, b;
    for (const auto& s : generate::generate_tokens(model, prompts, options)) a.push_back(s.tokens);
    for (const auto& s : generate::generate_tokens(model, prompts, eager)) b.push_back(s.tokens);
    EXPECT_EQ(a, b);
  }
}

// Twelve new tokens a prompt in bf16, greedy (temperature 0) or sampled with a fixed seed.
generate::GenerationOptions twelve_tokens(double temperature) {
  generate::GenerationOptions options;
  options.max_new_tokens = 12;
  options.compute_dtype = DType::BF16;
  options.sampling.temperature = temperature;
  options.sampling.seed = 5;
  return options;
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<generate::GeneratedSequence>& sequences) {
  std::vector<std::vector<int32_t>> tokens;
  for (const auto& s : sequences) tokens.push_back(s.tokens);
  return tokens;
}

// kPrompts' tokens with the decode step replayed as a CUDA graph (checked to be captured).
std::vector<std::vector<int32_t>> graphed_tokens(const GptModel& model, double temperature) {
  const auto graphed = generate::generate_tokens(model, kPrompts, twelve_tokens(temperature));
  EXPECT_GT(graphed[0].decode_graph_nodes, 0) << "the decode step was not captured";
  return tokens_of(graphed);
}

// Graph decoding replays the fused kernels (and their programmatic dependencies) to the tokens of eager decoding,
// greedy and sampled; programmatic dependent launch off gives the same tokens.
TEST(DecodeFused, GpuGraphDecodingEqualsEagerDecoding) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const DecodeFusionScope gpu(DecodeFusion::Gpu);
  for (const Case& c : cases()) {
    GptModel model(c.config);
    model.initialize(11);
    model.to(Device::cuda(0));
    for (double temperature : {0.0, 0.9}) {
      SCOPED_TRACE(c.name + (temperature > 0 ? " sampled" : " greedy"));
      const std::vector<std::vector<int32_t>> a = graphed_tokens(model, temperature);
      generate::GenerationOptions eager = twelve_tokens(temperature);
      eager.cuda_graphs = false;
      const std::vector<std::vector<int32_t>> b = tokens_of(generate::generate_tokens(model, kPrompts, eager));
      kernels::set_decode_dependent_launch_enabled(false);
      const auto d = tokens_of(generate::generate_tokens(model, kPrompts, twelve_tokens(temperature)));
      kernels::set_decode_dependent_launch_enabled(true);
      EXPECT_EQ(a, b);
      EXPECT_EQ(a, d);
    }
  }
}

// RETORT_DECODE_LAYERS set for a scope.
class DecodeLayersSetting {
 public:
  explicit DecodeLayersSetting(const char* value) { setenv("RETORT_DECODE_LAYERS", value, 1); }
  ~DecodeLayersSetting() { unsetenv("RETORT_DECODE_LAYERS"); }
  DecodeLayersSetting(const DecodeLayersSetting&) = delete;
  DecodeLayersSetting& operator=(const DecodeLayersSetting&) = delete;
};

GptConfig one_launch_config(int64_t layers) {
  GptConfig c = gpt_config(true, true);
  c.n_embd = 256;
  c.n_head = 4;
  c.n_layer = layers;
  c.init_std = 0.05;
  return c;
}

int64_t count(const std::map<std::string, int64_t>& calls, const char* name) {
  return calls.count(name) ? calls.at(name) : 0;
}

TEST(DecodeFused, OneLaunchForEveryBlockOnCpu) {
  const DecodeFusionScope everywhere(DecodeFusion::Everywhere);
  const DecodeLayersSetting on("1");
  GptModel model(one_launch_config(2));
  model.initialize(7);
  const auto calls = step_dispatches(model, DType::F32);
  EXPECT_EQ(count(calls, "gpt_decode_layers"), 1);
  EXPECT_EQ(count(calls, "small_m_linear"), 1);  // the head
  EXPECT_EQ(count(calls, "attention_with_cache"), 0);
  check_model(model, DType::F32, DecodeFusion::Everywhere, 1e-5);
  check_model(model, DType::BF16, DecodeFusion::Everywhere, 3e-2);
  {
    const DecodeLayersSetting off("0");
    EXPECT_EQ(count(step_dispatches(model, DType::F32), "gpt_decode_layers"), 0);
  }
  // Without the setting the CPU takes the per-op fused path (the one launch is the default on the GPU only).
  unsetenv("RETORT_DECODE_LAYERS");
  EXPECT_EQ(count(step_dispatches(model, DType::F32), "gpt_decode_layers"), 0);
  EXPECT_EQ(count(step_dispatches(model, DType::F32), "small_m_linear"), 4 * 2 + 1);
}

TEST(DecodeFused, GpuOneLaunchForEveryBlock) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t layers : {2, 17}) {  // 17: two launches
    SCOPED_TRACE(std::to_string(layers) + " layers");
    GptModel model(one_launch_config(layers));
    model.initialize(7);
    model.to(Device::cuda(0));
    const DecodeLayersSetting on("1");
    {
      const DecodeFusionScope gpu(DecodeFusion::Gpu);
      EXPECT_EQ(count(step_dispatches(model, DType::BF16), "gpt_decode_layers"), 1);
      // Without the setting: the one launch from 4 to 16 rows (ops::kDecodeLayersDefaultMinRows / MaxRows), the
      // per-op step outside; with it at 0, never.
      unsetenv("RETORT_DECODE_LAYERS");
      for (int64_t rows : {3, 4, 16, 17})
        EXPECT_EQ(count(step_dispatches(model, DType::BF16, rows), "gpt_decode_layers"),
                  rows >= 4 && rows <= 16 ? 1 : 0)
            << rows << " rows";
      setenv("RETORT_DECODE_LAYERS", "0", 1);
      EXPECT_EQ(count(step_dispatches(model, DType::BF16, 8), "gpt_decode_layers"), 0);
      setenv("RETORT_DECODE_LAYERS", "1", 1);
    }
    check_model(model, DType::BF16, DecodeFusion::Gpu, 3e-2);
    const DecodeFusionScope gpu(DecodeFusion::Gpu);
    for (double temperature : {0.0, 0.9}) {
      const std::vector<std::vector<int32_t>> a = graphed_tokens(model, temperature);
      generate::GenerationOptions eager = twelve_tokens(temperature);
      eager.cuda_graphs = false;
      EXPECT_EQ(a, tokens_of(generate::generate_tokens(model, kPrompts, eager))) << "temperature " << temperature;
    }
  }
  const DecodeLayersSetting on("1");
  GptConfig config = one_launch_config(2);
  config.init_std = 0.3;
  GptModel model(config);
  model.initialize(11);
  model.to(Device::cuda(0));
  check_greedy_tokens(model, DType::BF16, DecodeFusion::Gpu, 0.1, 15);
}

// Past the fused rows (17 to ops::kPartialProductsMaxRows): a GPT block leaves its two output projections as partial
// sums that the norm after each adds up (ops::decode_partial_products_apply); the logits follow the unfused path's on
// the CPU and on the GPU in bf16, and RETORT_DECODE_PARTIAL_PRODUCTS=0 turns it off.
TEST(DecodeFused, PartialProductsPastTheFusedRows) {
  std::vector<std::vector<int32_t>> prompts;  // 18 rows: past the 16 the fused path takes
  for (int32_t i = 0; i < 18; ++i) prompts.push_back({1 + i % 7, 2 + i % 5, 3 + (i * 3) % 11});
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    GptModel model(gpt_config(true, bias));
    model.initialize(5);
    const int64_t layers = model.config().n_layer;
    {
      const DecodeFusionScope everywhere(DecodeFusion::Everywhere);
      const auto calls = step_dispatches(model, DType::F32, 18);
      EXPECT_EQ(count(calls, "linear_partials"), 2 * layers);
      // LN2 of every block, LN1 of every block after the first, the last update without a norm.
      EXPECT_EQ(count(calls, "add_partials_norm"), 2 * layers);
      EXPECT_EQ(count(calls, "add_layer_norm_forward"), 0);
      EXPECT_EQ(count(calls, "small_m_linear"), 0);
      EXPECT_EQ(count(step_dispatches(model, DType::F32, 65), "linear_partials"), 0);  // past kPartialProductsMaxRows
    }
    check_model(model, DType::F32, DecodeFusion::Everywhere, 1e-5, prompts);
    check_model(model, DType::BF16, DecodeFusion::Everywhere, 3e-2, prompts);
    if (cuda_available()) {
      model.to(Device::cuda(0));
      check_model(model, DType::BF16, DecodeFusion::Gpu, 3e-2, prompts);
      model.to(Device::cpu());
    }
    setenv("RETORT_DECODE_PARTIAL_PRODUCTS", "0", 1);
    {
      const DecodeFusionScope everywhere(DecodeFusion::Everywhere);
      EXPECT_EQ(count(step_dispatches(model, DType::F32, 18), "linear_partials"), 0);
    }
    unsetenv("RETORT_DECODE_PARTIAL_PRODUCTS");
  }
}

}  // namespace
}  // namespace retort
