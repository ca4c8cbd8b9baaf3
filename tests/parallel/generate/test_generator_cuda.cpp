// generate_tokens on the GPU: greedy decoding with the KV cache equals the argmax of the full forward on the GPU
// and the CPU's greedy tokens; sampled decoding equals sampling the full forward, and a batch equals one-by-one
// generation; bf16 compute follows the bf16 full forward wherever its top two logits are not near a tie. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "parallel/generate/graphed_decode_step.h"
#include "parallel/generate/kv_cache.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/generate/generator_test_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort {
namespace {

using generate::generate_tokens;
using generate::GenerationOptions;
using namespace generate_testing;

GenerationOptions options_with(double temperature, int64_t max_new) {
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = temperature;
  o.sampling.top_k = temperature > 0 ? 24 : 0;
  o.sampling.seed = 4;
  return o;
}

TEST(GeneratorCuda, GreedyWithTheCacheEqualsTheFullForwardAndTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel cpu(tiny_config()), gpu(tiny_config());
  cpu.initialize(11);
  gpu.initialize(11);
  gpu.to(Device::cuda(0));
  const auto prompts = tiny_prompts();
  const auto on_gpu = generate_tokens(gpu, prompts, options_with(0.0, 12));
  const auto on_cpu = generate_tokens(cpu, prompts, options_with(0.0, 12));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(on_gpu[i].tokens, greedy_by_full_forward(gpu, prompts[i], 12)) << "prompt " << i;
    EXPECT_EQ(on_gpu[i].tokens, on_cpu[i].tokens) << "prompt " << i;
    EXPECT_EQ(on_gpu[i].finish, on_cpu[i].finish) << "prompt " << i;
  }
}

TEST(GeneratorCuda, SampledEqualsTheFullForwardAndABatchEqualsOneByOne) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel gpu(tiny_config());
  gpu.initialize(11);
  gpu.to(Device::cuda(0));
  const auto prompts = tiny_prompts();
  const GenerationOptions options = options_with(0.9, 10);
  const auto batched = generate_tokens(gpu, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batched[i].tokens, sampled_by_full_forward(gpu, prompts[i], 10, options.sampling, i)) << i;
    GenerationOptions alone = options;
    alone.sequence_ids = {i};
    EXPECT_EQ(generate_tokens(gpu, {prompts[i]}, alone)[0].tokens, batched[i].tokens) << i;
  }
}

TEST(GeneratorCuda, Bf16FollowsTheBf16FullForwardAwayFromTies) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel gpu(tiny_config());
  gpu.initialize(11);
  gpu.to(Device::cuda(0));
  GenerationOptions options = options_with(0.0, 12);
  options.compute_dtype = DType::BF16;
  const auto prompts = tiny_prompts();
  const auto generated = generate_tokens(gpu, prompts, options);
  int64_t compared = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Walk the cached run's tokens; where the bf16 full forward's best logit leads the next by a clear margin
    // (bf16 keeps 8 bits), the token must be its argmax; stop at the first near-tie (the runs may part there).
    std::vector<int32_t> sequence = prompts[i];
    for (int32_t token : generated[i].tokens) {
      std::vector<double> row = full_forward_last_logits(gpu, sequence, DType::BF16);
      const int32_t best = argmax(row);
      std::vector<double> sorted = row;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] < 0.1) break;
      EXPECT_EQ(token, best) << "prompt " << i << ", new token " << sequence.size() - prompts[i].size();
      ++compared;
      sequence.push_back(token);
    }
  }
  EXPECT_GE(compared, 20) << "too few tokens away from a tie to compare";
}

// The decode step replayed from a CUDA graph (GenerationOptions::cuda_graphs, the default on a GPU) gives the same
// tokens, bit for bit, as launching every kernel from the host: greedy (the argmax pass inside the graph), plain
// sampling (the Gumbel pass inside the graph, its row keys copied in before every replay) and top_k / top_p
// sampling (the sampler after the graph), f32 and bf16, gpt and the Llama family (rotary positions read on the
// device). The graph is really captured (its node count is reported), and RETORT_DECODE_GRAPHS=0 turns it off.
TEST(GeneratorCuda, GraphDecodingEqualsDecodingWithoutAGraph) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptConfig qwen3 = tiny_config();
  qwen3.family = "qwen3";
  qwen3.norm = "rmsnorm";
  qwen3.bias = false;
  qwen3.n_kv_head = 2;
  qwen3.qk_norm = true;
  GptConfig tied = tiny_config();
  tied.tie_weights = true;
  const std::vector<std::pair<std::string, GptConfig>> configs{
      {"gpt", tiny_config()}, {"gpt tied", tied}, {"qwen3", qwen3}};
  auto prompts = tiny_prompts();
  prompts.push_back({63, 62, 61});
  prompts.push_back({7, 7});
  for (const auto& [name, config] : configs) {
    GptModel gpu(config);
    gpu.initialize(11);
    gpu.to(Device::cuda(0));
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (int mode = 0; mode < 3; ++mode) {
        GenerationOptions options = options_with(mode == 0 ? 0.0 : 0.9, 12);
        options.sampling.top_k = mode == 2 ? 24 : 0;
        options.sampling.top_p = mode == 2 ? 0.95 : 1.0;
        options.compute_dtype = dtype;
        SCOPED_TRACE(fmt::format("{}, {}, {}", name, dtype_name(dtype),
                                 mode == 0   ? "greedy"
                                 : mode == 1 ? "sampled"
                                             : "top_k / top_p"));
        GenerationOptions eager = options;
        eager.cuda_graphs = false;
        const auto with_graph = generate_tokens(gpu, prompts, options);
        const auto without = generate_tokens(gpu, prompts, eager);
        EXPECT_EQ(tokens_of(with_graph), tokens_of(without));
        for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(with_graph[i].finish, without[i].finish) << i;
        EXPECT_GT(with_graph[0].decode_graph_nodes, 0) << "the decode step was not captured";
        EXPECT_EQ(without[0].decode_graph_nodes, 0);
      }
    }
  }
  // The environment switch: the same call decodes without a graph, to the same tokens.
  GptModel gpu(tiny_config());
  gpu.initialize(11);
  gpu.to(Device::cuda(0));
  const auto with_graph = generate_tokens(gpu, prompts, options_with(0.9, 12));
  setenv("RETORT_DECODE_GRAPHS", "0", 1);
  const auto switched_off = generate_tokens(gpu, prompts, options_with(0.9, 12));
  unsetenv("RETORT_DECODE_GRAPHS");
  EXPECT_EQ(switched_off[0].decode_graph_nodes, 0);
  EXPECT_GT(with_graph[0].decode_graph_nodes, 0);
  EXPECT_EQ(tokens_of(switched_off), tokens_of(with_graph));
}

// A batch of 32 longer sequences (GPT-2's layout at a small width), bf16, greedy and sampled: the graph's tokens
// equal the eager ones over 40 steps, where positions advance far past the first capture.
TEST(GeneratorCuda, GraphDecodingOfALargerBatchEqualsDecodingWithoutAGraph) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptConfig config = tiny_config();
  config.block_size = 96;
  config.vocab_size = 512;
  config.n_embd = 64;
  config.init_std = 0.1;
  GptModel gpu(config);
  gpu.initialize(3);
  gpu.to(Device::cuda(0));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 3 + (i * 7) % 20; ++t) p.push_back((i * 131 + t * 17) % 512);
    prompts.push_back(p);
  }
  for (double temperature : {0.0, 0.8}) {
    SCOPED_TRACE(fmt::format("temperature {}", temperature));
    GenerationOptions options = options_with(temperature, 40);
    options.sampling.top_k = 0;
    options.compute_dtype = DType::BF16;
    GenerationOptions eager = options;
    eager.cuda_graphs = false;
    const auto with_graph = generate_tokens(gpu, prompts, options);
    EXPECT_EQ(tokens_of(with_graph), tokens_of(generate_tokens(gpu, prompts, eager)));
    EXPECT_GT(with_graph[0].decode_graph_nodes, 0);
  }
}

// With a single-pass sampler the host launches a step before it has read the one before (GraphedDecodeStep): the
// sequences still stop where decoding without a graph stops them, by on_token (which the host learns one step
// late), by max_new_tokens and by the full context, with the same tokens, finish reasons and callbacks in the same
// order, and RETORT_DECODE_PIPELINE=0 (one step in flight) gives the same again.
TEST(GeneratorCuda, StepsInFlightStopWhereTheEagerStepsStop) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel gpu(tiny_config());
  gpu.initialize(11);
  gpu.to(Device::cuda(0));
  auto prompts = tiny_prompts();
  prompts.push_back({63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50});  // two new tokens fill the context
  prompts.push_back({7, 7});
  prompts.push_back({1, 2, 3});
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (double temperature : {0.0, 0.9}) {
      SCOPED_TRACE(fmt::format("{}, temperature {}", dtype_name(dtype), temperature));
      std::vector<std::pair<int64_t, int32_t>> calls;
      GenerationOptions options = options_with(temperature, 12);
      options.sampling.top_k = 0;
      options.compute_dtype = dtype;
      // Stops on a token the host cannot foresee: row i at its first token divisible by 5 + i % 3, or at its
      // (4 + i)-th token.
      std::vector<int64_t> counts;
      options.on_token = [&](int64_t sequence, int32_t token) {
        calls.emplace_back(sequence, token);
        const int64_t count = ++counts[static_cast<size_t>(sequence)];
        return token % (5 + sequence % 3) != 0 && count < 4 + sequence;
      };
      auto run = [&](bool graphs) {
        calls.clear();
        counts.assign(prompts.size(), 0);
        GenerationOptions o = options;
        o.cuda_graphs = graphs;
        auto generated = generate_tokens(gpu, prompts, o);
        return std::make_pair(std::move(generated), calls);
      };
      const auto [eager, eager_calls] = run(false);
      const auto [in_flight, in_flight_calls] = run(true);
      setenv("RETORT_DECODE_PIPELINE", "0", 1);
      const auto [one_at_a_time, one_at_a_time_calls] = run(true);
      unsetenv("RETORT_DECODE_PIPELINE");
      EXPECT_EQ(tokens_of(in_flight), tokens_of(eager));
      EXPECT_EQ(tokens_of(one_at_a_time), tokens_of(eager));
      EXPECT_EQ(in_flight_calls, eager_calls);
      EXPECT_EQ(one_at_a_time_calls, eager_calls);
      int stopped = 0, full = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(in_flight[i].finish, eager[i].finish) << i;
        EXPECT_EQ(one_at_a_time[i].finish, eager[i].finish) << i;
        stopped += eager[i].finish == generate::FinishReason::Stopped;
        full += eager[i].finish == generate::FinishReason::ContextFull;
      }
      EXPECT_GE(stopped, 3) << "too few sequences stopped by on_token to test it";
      EXPECT_GE(full, 1) << "no sequence filled its context";
      EXPECT_GT(in_flight[0].decode_graph_nodes, 0);
    }
  }
}

// GraphedDecodeStep itself: two steps in flight, the second fed on the device with the tokens the first drew,
// give every step the tokens that feeding each step from the host gives; at most depth() steps wait, and only a
// step after the first may take its ids from the device.
TEST(GeneratorCuda, AStepFedOnTheDeviceEqualsAStepFedByTheHost) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  NoGradGuard no_grad;
  GptModel gpu(tiny_config());
  gpu.initialize(5);
  gpu.to(Device::cuda(0));
  const int64_t B = 3, steps = 8;
  const std::vector<int32_t> first{4, 40, 63};
  for (double temperature : {0.0, 0.9}) {
    SCOPED_TRACE(fmt::format("temperature {}", temperature));
    generate::SamplingOptions sampling;
    sampling.temperature = temperature;
    sampling.seed = 9;
    auto positions_at = [&](int64_t s) { return std::vector<int32_t>(B, static_cast<int32_t>(s)); };
    auto keys_at = [&](int64_t s) {
      std::vector<uint64_t> keys;
      for (int64_t r = 0; r < B; ++r) keys.push_back(generate::sequence_row_key(static_cast<uint64_t>(r), s + 1));
      return keys;
    };
    // From the host: each step is fed the tokens collected from the one before.
    std::vector<std::vector<int32_t>> by_host;
    {
      generate::KvCache cache(gpu, B, steps, DType::F32, Device::cuda(0));
      generate::GraphedDecodeStep step(gpu, cache, DType::F32, sampling);
      std::vector<int32_t> ids = first;
      for (int64_t s = 0; s < steps; ++s) {
        step.launch(ids, positions_at(s), keys_at(s));
        ids = step.collect();
        by_host.push_back(ids);
      }
      EXPECT_TRUE(step.graphed());
    }
    // On the device: two in flight, the host reading each step's tokens after the next one is launched.
    generate::KvCache cache(gpu, B, steps, DType::F32, Device::cuda(0));
    generate::GraphedDecodeStep step(gpu, cache, DType::F32, sampling);
    ASSERT_EQ(step.depth(), 2);
    EXPECT_THROW(step.launch({}, positions_at(0), keys_at(0)), Error);
    std::vector<std::vector<int32_t>> on_device;
    step.launch(first, positions_at(0), keys_at(0));
    for (int64_t s = 1; s < steps; ++s) {
      step.launch({}, positions_at(s), keys_at(s));
      EXPECT_EQ(step.in_flight(), 2);
      EXPECT_THROW(step.launch({}, positions_at(s + 1), keys_at(s + 1)), Error);
      on_device.push_back(step.collect());
    }
    on_device.push_back(step.collect());
    EXPECT_EQ(step.in_flight(), 0);
    EXPECT_TRUE(step.graphed());
    EXPECT_EQ(on_device, by_host);
  }
}

// tp 2 over NCCL, one GPU per rank: each rank holds half the heads and half the vocabulary, the sampler picks the
// token without gathering the logits, and the tokens equal one GPU's, greedy and sampled. Skipped without two GPUs.
TEST(GeneratorNccl, TwoGpusGenerateWhatOneGpuGenerates) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  GptModel single(tiny_config());
  single.initialize(11);
  single.to(Device::cuda(0));
  const auto prompts = tiny_prompts();
  const auto greedy = tokens_of(generate_tokens(single, prompts, options_with(0.0, 12)));
  const auto sampled = tokens_of(generate_tokens(single, prompts, options_with(0.8, 12)));
  comm_testing::on_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo->rank();
    auto nccl = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
    GptModel model(tiny_config(), nccl);
    model.initialize(11);
    model.to(Device::cuda(rank));
    EXPECT_EQ(tokens_of(generate_tokens(model, prompts, options_with(0.0, 12))), greedy) << "greedy, rank " << rank;
    EXPECT_EQ(tokens_of(generate_tokens(model, prompts, options_with(0.8, 12))), sampled) << "sampled, rank " << rank;
  });
#endif
}

}  // namespace
}  // namespace retort
