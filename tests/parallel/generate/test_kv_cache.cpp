// The GPT's cached forward on the CPU. Its logits, after a right-padded prefill and after every decode step,
// against the full forward over each row's whole prefix (tied and untied heads, f32 and bf16); a batch against
// each of its rows generated alone; at tp 1, 2 and 4 (each rank's local logits against its vocabulary slice of
// the dense model's); reset; and the errors of KvCache and forward_cached.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/generate/kv_cache_test_support.h"
#include "tests/parallel/tp/tp_test_support.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using namespace kv_cache_testing;

TEST(GptKvCache, CachedLogitsEqualTheFullForwardAtEveryStep) {
  for (bool tied : {true, false}) {
    GptConfig config = small_config();
    config.tie_weights = tied;
    GptModel model(config), reference(config);
    model.initialize(7);
    reference.initialize(7);
    check_cached_against_full(model, reference, DType::F32, Device::cpu(), 1e-5, tied ? "tied" : "untied");
  }
}

TEST(GptKvCache, Bf16CacheOnTheCpu) {
  GptModel model(small_config());
  model.initialize(7);
  // bf16 compute rounds every layer's output (and the cached keys and values) to 8 significant bits, 2^-8
  // relative at worst per rounding; about ten roundings between the embedding and the logits, through layers
  // that amplify by their weights (init_std 0.2), move logits of size ~1 by a few 1e-2 (at most 0.038 (1 + |w|)
  // in this script).
  check_cached_against_full(model, model, DType::BF16, Device::cpu(), 6e-2, "bf16");
}

// Rows of a batch are independent: each row's logits equal those of the same row generated in a batch of one
// (right padding, rows that sit out steps and other rows' lengths change nothing).
TEST(GptKvCache, ABatchEqualsEachRowAlone) {
  GptModel model(small_config());
  model.initialize(7);
  const auto& prompts = script_prompts();
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model.config().vocab_size;
  const std::vector<std::vector<double>> batched =
      check_cached_against_full(model, model, DType::F32, Device::cpu(), 1e-5, "batched");
  for (int64_t b = 0; b < B; ++b) {
    generate::KvCache cache(model, 1, model.config().block_size, DType::F32, Device::cpu());
    const auto& prompt = prompts[static_cast<size_t>(b)];
    std::vector<std::vector<double>> alone{
        model
            .forward_cached(Tensor::from_ints(prompt, {1, static_cast<int64_t>(prompt.size())}),
                            {static_cast<int64_t>(prompt.size())}, cache)
            .to_doubles()};
    std::vector<size_t> calls{0};  // the batched call each of this row's calls matches
    for (int step = 0; step < kScriptSteps; ++step) {
      if (!script_active(b, step)) continue;
      alone.push_back(
          model.forward_cached(Tensor::from_ints({script_token(b, step)}, {1, 1}), {1}, cache).to_doubles());
      calls.push_back(static_cast<size_t>(step + 1));
    }
    for (size_t i = 0; i < alone.size(); ++i)
      for (int64_t v = 0; v < V; ++v) {
        // The same arithmetic on matrices of other shapes, which the products block differently: f32 rounding
        // (a few 1e-6 here), where another row's keys or padding leaking in would move logits by ~0.1.
        const double want = alone[i][static_cast<size_t>(v)];
        ASSERT_NEAR(batched[calls[i]][static_cast<size_t>(b * V + v)], want, 1e-5 * (1 + std::abs(want)))
            << "row " << b << " call " << calls[i] << " token " << v;
      }
  }
}

TEST(GptKvCache, EveryTpRankHoldsItsSliceOfTheDenseLogits) {
  GptModel dense(small_config());
  dense.initialize(7);
  for (bool tied : {true, false}) {
    GptConfig config = small_config();
    config.tie_weights = tied;
    config.n_head = 8;  // so that every tp of kTpSizes, 8 included, divides the heads
    GptModel reference(config);
    reference.initialize(7);
    for (int tp : tp_testing::kTpSizes) {
      run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
        GptModel model(config, comm);
        model.initialize(7);
        check_cached_against_full(model, reference, DType::F32, Device::cpu(), 1e-5,
                                  "tp " + std::to_string(tp) + (tied ? " tied" : " untied"));
      });
    }
  }
}

TEST(GptKvCache, ResetForgetsEverySequence) {
  GptModel model(small_config());
  model.initialize(7);
  generate::KvCache cache(model, 2, 8, DType::F32, Device::cpu());
  const Tensor prompt = Tensor::from_ints({5, 6, 7, 1, 2, 0}, {2, 3});
  const std::vector<double> first = model.forward_cached(prompt, {3, 2}, cache).to_doubles();
  model.forward_cached(Tensor::from_ints({9, 9}, {2, 1}), {1, 1}, cache);
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({4, 3}));
  cache.reset();
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({0, 0}));
  // The same computation on overwritten slots: bit for bit the first prefill.
  EXPECT_EQ(model.forward_cached(prompt, {3, 2}, cache).to_doubles(), first);
}

TEST(GptKvCache, CacheShape) {
  for (int tp : {1, 2}) {
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      GptModel model(small_config(), comm);
      generate::KvCache cache(model, 3, 10, DType::BF16, Device::cpu());
      EXPECT_EQ(cache.batch(), 3);
      EXPECT_EQ(cache.capacity(), 10);
      EXPECT_EQ(cache.lengths(), std::vector<int64_t>({0, 0, 0}));
      for (int64_t layer = 0; layer < model.config().n_layer; ++layer) {
        // This rank's heads only: 4 / tp of them, head_dim 32 / 4.
        EXPECT_EQ(cache.keys(layer).shape(), Shape({3, 4 / tp, 10, 8}));
        EXPECT_EQ(cache.values(layer).shape(), Shape({3, 4 / tp, 10, 8}));
        EXPECT_EQ(cache.keys(layer).dtype(), DType::BF16);
      }
    });
  }
}

TEST(GptKvCache, Errors) {
  GptModel model(small_config());
  model.initialize(7);
  const std::string too_long = testing::message_of([&] { generate::KvCache(model, 2, 17, DType::F32, Device::cpu()); });
  EXPECT_NE(too_long.find("block_size = 16"), std::string::npos) << too_long;
  EXPECT_THROW(generate::KvCache(model, 0, 8, DType::F32, Device::cpu()), InputError);
  EXPECT_THROW(generate::KvCache(model, 2, 0, DType::F32, Device::cpu()), InputError);

  generate::KvCache cache(model, 2, 4, DType::F32, Device::cpu());
  model.forward_cached(Tensor::from_ints({1, 2, 3, 4, 5, 0}, {2, 3}), {3, 2}, cache);
  // Row 1 (length 2) can take 2 more, row 0 (length 3) only 1: the error names row 0.
  const std::string full = testing::message_of([&] {
    model.forward_cached(Tensor::from_ints({4, 5, 6, 7}, {2, 2}), {2, 2}, cache);
  });
  EXPECT_NE(full.find("sequence 0"), std::string::npos) << full;
  EXPECT_NE(full.find("context is full"), std::string::npos) << full;
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({3, 2}));  // the refused call changed nothing
  EXPECT_THROW(cache.advance({1, 3}), InputError);           // row 1 would pass the capacity
  EXPECT_THROW(cache.advance({-1, 0}), InputError);
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({3, 2}));  // nor did the refused advances
  // A row that sits out a step may be full.
  model.forward_cached(Tensor::from_ints({4, 5, 6, 7}, {2, 2}), {1, 2}, cache);
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({4, 4}));
  model.forward_cached(Tensor::from_ints({1, 1}, {2, 1}), {0, 0}, cache);

  cache.reset();
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {1, 2}), {2}, cache), Error);  // batch 1 vs 2
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2, 1}), {1}, cache), Error);  // one count for 2 rows
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2, 1}), {2, 1}, cache), InputError);  // 2 > T_new
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2, 1}), {-1, 1}, cache), InputError);
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2}), {1, 1}, cache), Error);  // ids not [B, T]
  // The cache holds f32 keys: a bf16 forward cannot write into it.
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2, 1}), {1, 1}, cache, DType::BF16), Error);
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({0, 0}));
}

}  // namespace
}  // namespace retort
