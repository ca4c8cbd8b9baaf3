// generate_tokens on the CPU at tp 1, 2 and 4 (Gloo thread ranks): greedy decoding with the KV cache equals the
// argmax of the full forward re-run over the whole sequence at every step; sampled decoding equals the sampler
// applied to the full forward; seeds reproduce and differ; top_k 1 is greedy; a batch of prompts of different
// lengths equals one-by-one generation; sequences end at max_new_tokens, at the context end and when on_token says
// so; bad prompts and options are InputErrors naming the problem.
#include <gtest/gtest.h>

#include <set>

#include "core/util/error.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/generate/generator_test_support.h"

namespace retort {
namespace {

using comm_testing::on_ranks;
using generate::FinishReason;
using generate::generate_tokens;
using generate::GenerationOptions;
using namespace generate_testing;

constexpr int kTpSizes[] = {1, 2, 4};

GenerationOptions greedy_options(int64_t max_new) {
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = 0.0;
  return o;
}

GenerationOptions sampled_options(int64_t max_new, uint64_t seed) {
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = 0.9;
  o.sampling.top_k = 24;
  o.sampling.top_p = 0.95;
  o.sampling.seed = seed;
  return o;
}

TEST(Generator, GreedyWithTheCacheEqualsTheArgmaxOfTheFullForward) {
  const auto prompts = tiny_prompts();
  for (int tp : kTpSizes) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      GptModel model(tiny_config(), group);
      model.initialize(11);
      const auto generated = generate_tokens(model, prompts, greedy_options(12));
      ASSERT_EQ(generated.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        const auto want = greedy_by_full_forward(model, prompts[i], 12);
        EXPECT_EQ(generated[i].tokens, want) << "prompt " << i;
        // 1, 3 and 4 tokens have room for 12 more (4 + 12 fills the context exactly: the token budget ends it
        // first); 6 and 12 tokens fill the 16-token context after 10 and 4.
        const bool fills = prompts[i].size() + 12 > 16;
        EXPECT_EQ(generated[i].finish, fills ? FinishReason::ContextFull : FinishReason::MaxTokens) << i;
        EXPECT_EQ(generated[i].tokens.size(), fills ? 16 - prompts[i].size() : 12u) << i;
      }
    });
  }
}

TEST(Generator, SampledWithTheCacheEqualsSamplingTheFullForward) {
  const auto prompts = tiny_prompts();
  for (int tp : {1, 2}) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      GptModel model(tiny_config(), group);
      model.initialize(11);
      const GenerationOptions options = sampled_options(10, 5);
      const auto generated = generate_tokens(model, prompts, options);
      for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(generated[i].tokens, sampled_by_full_forward(model, prompts[i], 10, options.sampling, i))
            << "prompt " << i;
    });
  }
}

TEST(Generator, ASeedReproducesItsTokensAndAnotherSeedDoesNot) {
  GptModel model(tiny_config());
  model.initialize(11);
  auto prompts = tiny_prompts();
  prompts.push_back(prompts[1]);  // the same prompt as sequence 1, under another sequence id
  const auto a = tokens_of(generate_tokens(model, prompts, sampled_options(10, 7)));
  const auto b = tokens_of(generate_tokens(model, prompts, sampled_options(10, 7)));
  const auto c = tokens_of(generate_tokens(model, prompts, sampled_options(10, 8)));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a[1], a.back()) << "two sequence ids drew the same noise";
  // The sampled runs are not greedy ones in disguise.
  EXPECT_NE(a, tokens_of(generate_tokens(model, prompts, greedy_options(10))));
}

TEST(Generator, TopKOneIsGreedy) {
  GptModel model(tiny_config());
  model.initialize(12);
  GenerationOptions top1 = sampled_options(12, 3);
  top1.sampling.temperature = 1.5;
  top1.sampling.top_k = 1;
  top1.sampling.top_p = 1.0;
  EXPECT_EQ(tokens_of(generate_tokens(model, tiny_prompts(), top1)),
            tokens_of(generate_tokens(model, tiny_prompts(), greedy_options(12))));
}

TEST(Generator, ABatchEqualsOneByOneGenerationWithTheSameSequenceIds) {
  const std::vector<std::vector<int32_t>> prompts = {
      {3, 1, 4, 1, 5}, {9}, {2, 7, 1, 8, 2, 8, 1, 8, 2}, {6, 0, 2}, {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}};
  for (int tp : {1, 2}) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      GptModel model(tiny_config(), group);
      model.initialize(13);
      for (const GenerationOptions& options : {greedy_options(9), sampled_options(9, 21)}) {
        const auto batched = generate_tokens(model, prompts, options);
        for (size_t i = 0; i < prompts.size(); ++i) {
          GenerationOptions alone = options;
          alone.sequence_ids = {i};
          const auto single = generate_tokens(model, {prompts[i]}, alone);
          EXPECT_EQ(batched[i].tokens, single[0].tokens) << "prompt " << i << ", T " << options.sampling.temperature;
          EXPECT_EQ(batched[i].finish, single[0].finish) << "prompt " << i;
        }
        // A batch in another order, each prompt keeping its id, gives each prompt the same tokens.
        GenerationOptions reversed_options = options;
        std::vector<std::vector<int32_t>> reversed(prompts.rbegin(), prompts.rend());
        for (size_t i = 0; i < prompts.size(); ++i) reversed_options.sequence_ids.push_back(prompts.size() - 1 - i);
        const auto again = generate_tokens(model, reversed, reversed_options);
        for (size_t i = 0; i < prompts.size(); ++i)
          EXPECT_EQ(again[prompts.size() - 1 - i].tokens, batched[i].tokens) << "prompt " << i;
      }
    });
  }
}

TEST(Generator, OnTokenFinishesItsSequenceAndNoOther) {
  GptModel model(tiny_config());
  model.initialize(11);
  const auto prompts = tiny_prompts();
  const auto free_run = generate_tokens(model, prompts, greedy_options(8));
  GenerationOptions options = greedy_options(8);
  std::vector<std::vector<int32_t>> seen(prompts.size());
  options.on_token = [&](int64_t sequence, int32_t token) {
    seen[static_cast<size_t>(sequence)].push_back(token);
    return !(sequence == 1 && seen[1].size() == 3);
  };
  const auto stopped = generate_tokens(model, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(seen[i], stopped[i].tokens) << "on_token saw every new token once, in order";
    if (i == 1) {
      EXPECT_EQ(stopped[i].finish, FinishReason::Stopped);
      EXPECT_EQ(stopped[i].tokens, std::vector<int32_t>(free_run[i].tokens.begin(), free_run[i].tokens.begin() + 3));
    } else {
      EXPECT_EQ(stopped[i].tokens, free_run[i].tokens) << i;
      EXPECT_EQ(stopped[i].finish, free_run[i].finish) << i;
    }
  }
}

TEST(Generator, OneNewTokenAndALastPositionPrompt) {
  GptModel model(tiny_config());
  model.initialize(11);
  // A 15-token prompt in a 16-token context has room for exactly one new token.
  std::vector<int32_t> longest(15);
  for (size_t i = 0; i < longest.size(); ++i) longest[i] = static_cast<int32_t>(i * 5 % 64);
  const auto generated = generate_tokens(model, {longest, {1, 2}}, greedy_options(1));
  ASSERT_EQ(generated[0].tokens.size(), 1u);
  EXPECT_EQ(generated[0].tokens, greedy_by_full_forward(model, longest, 1));
  EXPECT_EQ(generated[1].tokens, greedy_by_full_forward(model, {1, 2}, 1));
  EXPECT_EQ(generated[1].finish, FinishReason::MaxTokens);
  EXPECT_GT(generated[0].prefill_seconds, 0.0);
  EXPECT_EQ(generated[0].decode_seconds, 0.0) << "a sequence finished by its prefill token spent no decode time";
  const auto longer = generate_tokens(model, {longest, {1, 2}}, greedy_options(5));
  EXPECT_EQ(longer[0].finish, FinishReason::ContextFull);
  EXPECT_EQ(longer[0].tokens, generated[0].tokens);
  EXPECT_EQ(longer[1].tokens.size(), 5u);
  EXPECT_GT(longer[1].decode_seconds, 0.0);
}

void expect_input_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (const auto& fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << "\nlacks: " << fragment;
  }
}

TEST(Generator, BadPromptsAndOptionsAreInputErrors) {
  GptModel model(tiny_config());
  model.initialize(11);
  const std::vector<int32_t> ok{1, 2, 3};
  expect_input_error([&] { generate_tokens(model, {ok, {}}, greedy_options(4)); }, {"prompt 1 is empty"});
  expect_input_error([&] { generate_tokens(model, {std::vector<int32_t>(16, 3)}, greedy_options(4)); },
                     {"prompt 0 has 16 tokens", "context is 16", "at most 15 tokens"});
  expect_input_error(
      [&] {
        generate_tokens(model, {ok, {1, 64}}, greedy_options(4));
      },
      {"prompt 1 holds token 64", "[0, 64)"});
  expect_input_error([&] { generate_tokens(model, {ok}, greedy_options(0)); }, {"max_new_tokens", "got 0"});
  GenerationOptions ids = greedy_options(4);
  ids.sequence_ids = {0, 1};
  expect_input_error([&] { generate_tokens(model, {ok}, ids); }, {"2 sequence ids for 1 prompts"});
  GenerationOptions cold = greedy_options(4);
  cold.sampling.temperature = -1;
  expect_input_error([&] { generate_tokens(model, {ok}, cold); }, {"temperature"});
  EXPECT_TRUE(generate_tokens(model, {}, greedy_options(4)).empty());
}

TEST(Generator, RowKeysSeparateSequencesAndPositions) {
  std::set<uint64_t> keys;
  for (uint64_t id = 0; id < 64; ++id)
    for (int64_t position = 0; position < 1024; ++position) keys.insert(generate::sequence_row_key(id, position));
  EXPECT_EQ(keys.size(), 64u * 1024u);
}

}  // namespace
}  // namespace retort
