// TokenLoader: batches are real windows of the shards, epochs visit each window once in a seeded order,
// data-parallel ranks split every global batch, eval passes are fixed, and state/restore resumes exactly.
//
// The shards hold tokens whose value is their own global position (shard 1 is offset by 100000), so every
// batch row tells which window it came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::TempFolder;

constexpr int64_t kVocab = 200000;  // above 65536: the loader reads uint32 shards here
constexpr int32_t kSecondShardBase = 100000;

fs::path write_counting_shard(const fs::path& path, int32_t first, int64_t count, int64_t vocab = kVocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  write_token_shard(path, tokens, vocab);
  return path;
}

// Window identity = its first input token. Checks that each row is T+1 consecutive tokens of one shard
// starting at a multiple of T, with targets = inputs shifted by one.
std::vector<int32_t> window_ids(const TokenBatch& batch, const std::vector<std::pair<int32_t, int64_t>>& shards) {
  std::vector<int32_t> ids;
  for (int64_t row = 0; row < batch.batch; ++row) {
    const int32_t* in = batch.inputs.data() + row * batch.seq;
    const int32_t* target = batch.targets.data() + row * batch.seq;
    bool inside_a_shard = false;
    for (const auto& [first, count] : shards) {
      const int64_t offset = in[0] - first;
      if (offset >= 0 && offset < count) {
        EXPECT_EQ(offset % batch.seq, 0) << "window start " << offset << " is not a multiple of T";
        EXPECT_LE(offset + batch.seq + 1, count) << "window runs past its shard";
        inside_a_shard = true;
      }
    }
    EXPECT_TRUE(inside_a_shard) << "row " << row << " starts at token " << in[0] << ", in no shard";
    for (int64_t t = 0; t < batch.seq; ++t) {
      EXPECT_EQ(in[t], in[0] + t) << "row " << row << " is not consecutive tokens";
      EXPECT_EQ(target[t], in[t] + 1) << "targets must be the inputs shifted by one";
    }
    ids.push_back(in[0]);
  }
  return ids;
}

// Two shards: 161 tokens (T=8 -> 20 windows) and 97 tokens (12 windows): 32 windows in all.
class DataLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_ = {write_counting_shard(folder_.path() / "train_000.bin", 0, 161),
              write_counting_shard(folder_.path() / "train_001.bin", kSecondShardBase, 97)};
    layout_ = {{0, 161}, {kSecondShardBase, 97}};
    for (int64_t w = 0; w < 20; ++w) all_windows_.push_back(static_cast<int32_t>(8 * w));
    for (int64_t w = 0; w < 12; ++w) all_windows_.push_back(static_cast<int32_t>(kSecondShardBase + 8 * w));
  }

  TokenLoader make(TokenLoaderOptions options) const { return TokenLoader(paths_, kVocab, options); }

  std::vector<int32_t> take_epoch(TokenLoader& loader) const {
    std::vector<int32_t> ids;
    for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      const std::vector<int32_t> batch = window_ids(loader.next(), layout_);
      ids.insert(ids.end(), batch.begin(), batch.end());
    }
    return ids;
  }

  TempFolder folder_;
  std::vector<fs::path> paths_;
  std::vector<std::pair<int32_t, int64_t>> layout_;
  std::vector<int32_t> all_windows_;
};

TEST_F(DataLoader, EveryWindowOncePerEpochInANewOrder) {
  TokenLoader loader = make({.batch_size = 4, .seq_len = 8, .seed = 11});
  EXPECT_EQ(loader.total_windows(), 32);
  EXPECT_EQ(loader.batches_per_epoch(), 8);
  std::vector<std::vector<int32_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(loader.epoch(), e);
    const TokenBatch first = loader.next();
    EXPECT_EQ(first.batch, 4);
    EXPECT_EQ(first.seq, 8);
    ASSERT_EQ(first.inputs.size(), 32u);
    std::vector<int32_t> order = window_ids(first, layout_);
    for (int64_t b = 1; b < loader.batches_per_epoch(); ++b) {
      const std::vector<int32_t> ids = window_ids(loader.next(), layout_);
      order.insert(order.end(), ids.begin(), ids.end());
    }
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all_windows_) << "epoch " << e << " must visit every window exactly once";
    EXPECT_NE(order, all_windows_) << "training order must be shuffled";
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST_F(DataLoader, SameSeedSameOrderOtherSeedOtherOrder) {
  TokenLoader a = make({.batch_size = 4, .seq_len = 8, .seed = 5});
  TokenLoader b = make({.batch_size = 4, .seq_len = 8, .seed = 5});
  TokenLoader c = make({.batch_size = 4, .seq_len = 8, .seed = 6});
  for (int e = 0; e < 2; ++e) {
    const std::vector<int32_t> order = take_epoch(a);
    EXPECT_EQ(take_epoch(b), order);
    EXPECT_NE(take_epoch(c), order);
  }
}

TEST_F(DataLoader, PartialLastBatchIsSkippedWithoutRepeats) {
  TokenLoader loader = make({.batch_size = 5, .seq_len = 8, .seed = 1});
  EXPECT_EQ(loader.batches_per_epoch(), 6);  // 32 windows / 5 = 6 full batches, 2 windows skipped
  std::set<int32_t> seen_over_epochs;
  for (int e = 0; e < 4; ++e) {
    const std::vector<int32_t> order = take_epoch(loader);
    const std::set<int32_t> distinct(order.begin(), order.end());
    EXPECT_EQ(distinct.size(), 30u) << "no window may repeat within an epoch";
    seen_over_epochs.insert(order.begin(), order.end());
  }
  EXPECT_EQ(seen_over_epochs.size(), 32u) << "the skipped windows differ between epochs";
}

TEST_F(DataLoader, StateRestoreContinuesTheSameSequence) {
  const TokenLoaderOptions options{.batch_size = 3, .seq_len = 8, .seed = 42};
  TokenLoader original = make(options);
  // 10 batches per epoch: stop inside epoch 1, so the restore must rebuild that epoch's order.
  for (int i = 0; i < 13; ++i) original.next();
  const nlohmann::json saved = original.state();
  EXPECT_EQ(saved.at("epoch"), 1);
  EXPECT_EQ(saved.at("position"), 3);

  TokenLoader resumed = make(options);
  resumed.next();  // a loader that already moved must still land exactly
  resumed.restore(nlohmann::json::parse(saved.dump()).get<LoaderState>());
  for (int i = 0; i < 25; ++i) {
    const TokenBatch expected = original.next();
    const TokenBatch actual = resumed.next();
    ASSERT_EQ(actual.inputs, expected.inputs) << "batch " << i << " after restore";
    ASSERT_EQ(actual.targets, expected.targets);
  }
  EXPECT_EQ(resumed.epoch(), original.epoch());

  // State taken exactly at an epoch's end resumes into the next epoch.
  TokenLoader at_end = make(options);
  for (int i = 0; i < 10; ++i) at_end.next();
  TokenLoader from_end = make(options);
  from_end.restore(at_end.state());
  EXPECT_EQ(from_end.next().inputs, at_end.next().inputs);
  EXPECT_EQ(from_end.epoch(), 1);
}

TEST_F(DataLoader, RestoreWithDifferentSettingsIsAnError) {
  TokenLoader loader = make({.batch_size = 4, .seq_len = 8, .seed = 1});
  loader.next();
  const LoaderState state = loader.state();
  TokenLoader other = make({.batch_size = 2, .seq_len = 8, .seed = 1});
  const std::string message = message_of([&] { other.restore(state); });
  EXPECT_NE(message.find("batch_size 4"), std::string::npos) << message;
  TokenLoader reseeded = make({.batch_size = 4, .seq_len = 8, .seed = 2});
  EXPECT_THROW(reseeded.restore(state), InputError);
  const nlohmann::json incomplete = {{"epoch", 1}};
  EXPECT_THROW((void)incomplete.get<LoaderState>(), InputError);
}

TEST_F(DataLoader, DataParallelRanksAreDisjointAndMatchOneBigBatch) {
  constexpr int64_t kWorld = 4;
  std::vector<TokenLoader> ranks;
  for (int64_t r = 0; r < kWorld; ++r)
    ranks.push_back(make({.batch_size = 2, .seq_len = 8, .seed = 9, .rank = r, .world = kWorld}));
  TokenLoader single = make({.batch_size = 2 * kWorld, .seq_len = 8, .seed = 9});
  ASSERT_EQ(ranks[0].batches_per_epoch(), 4);
  ASSERT_EQ(single.batches_per_epoch(), 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int32_t> covered;
    for (int64_t step = 0; step < 4; ++step) {
      std::vector<int32_t> global;
      for (TokenLoader& rank : ranks) {
        const std::vector<int32_t> ids = window_ids(rank.next(), layout_);
        global.insert(global.end(), ids.begin(), ids.end());
      }
      EXPECT_EQ(global, window_ids(single.next(), layout_)) << "step " << step;
      covered.insert(covered.end(), global.begin(), global.end());
    }
    std::sort(covered.begin(), covered.end());
    EXPECT_EQ(covered, all_windows_) << "ranks together must cover the epoch, each window once";
  }
}

TEST_F(DataLoader, EvalIsSequentialFixedAndCapped) {
  TokenLoader loader = make({.batch_size = 4, .seq_len = 8, .mode = LoaderMode::kEval});
  EXPECT_EQ(loader.batches_per_epoch(), 8);
  EXPECT_EQ(take_epoch(loader), all_windows_);
  EXPECT_EQ(take_epoch(loader), all_windows_) << "a second pass repeats the first";
  loader.reset();
  EXPECT_EQ(loader.epoch(), 0);
  EXPECT_EQ(window_ids(loader.next(), layout_), std::vector<int32_t>(all_windows_.begin(), all_windows_.begin() + 4));

  TokenLoader capped = make({.batch_size = 4, .seq_len = 8, .mode = LoaderMode::kEval, .max_batches = 3});
  EXPECT_EQ(capped.batches_per_epoch(), 3);
  EXPECT_EQ(take_epoch(capped), std::vector<int32_t>(all_windows_.begin(), all_windows_.begin() + 12));

  // Ranks split each global eval batch.
  TokenLoader rank0 = make({.batch_size = 2, .seq_len = 8, .mode = LoaderMode::kEval, .rank = 0, .world = 2});
  TokenLoader rank1 = make({.batch_size = 2, .seq_len = 8, .mode = LoaderMode::kEval, .rank = 1, .world = 2});
  EXPECT_EQ(window_ids(rank0.next(), layout_), (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(window_ids(rank1.next(), layout_), (std::vector<int32_t>{16, 24}));
}

TEST_F(DataLoader, ReadsUint16ShardsToo) {
  const fs::path narrow = write_counting_shard(folder_.path() / "narrow.bin", 1000, 65, /*vocab=*/8192);
  TokenLoader loader({narrow}, 8192, {.batch_size = 8, .seq_len = 8, .mode = LoaderMode::kEval});
  const std::vector<int32_t> ids = window_ids(loader.next(), {{1000, 65}});
  EXPECT_EQ(ids, (std::vector<int32_t>{1000, 1008, 1016, 1024, 1032, 1040, 1048, 1056}));
}

TEST_F(DataLoader, ClearErrors) {
  const fs::path tiny = write_counting_shard(folder_.path() / "tiny.bin", 0, 8);
  std::string message = message_of([&] { TokenLoader({tiny}, kVocab, {.batch_size = 1, .seq_len = 8}); });
  EXPECT_NE(message.find(tiny.string()), std::string::npos) << message;
  EXPECT_NE(message.find("8 tokens"), std::string::npos) << message;

  message = message_of([&] { make({.batch_size = 33, .seq_len = 8}); });
  EXPECT_NE(message.find("32 windows"), std::string::npos) << message;
  EXPECT_NE(message.find("batch 33"), std::string::npos) << message;
  EXPECT_THROW(make({.batch_size = 16, .seq_len = 8, .world = 3}), InputError);  // 48 > 32 windows

  EXPECT_THROW(make({.batch_size = 1, .seq_len = 8, .rank = 2, .world = 2}), InputError);
  EXPECT_THROW(make({.batch_size = 0, .seq_len = 8}), InputError);
  EXPECT_THROW(TokenLoader({}, kVocab, {.batch_size = 1, .seq_len = 8}), InputError);
  // A shard with ids beyond the vocabulary is rejected when the loader opens it.
  EXPECT_THROW(TokenLoader(paths_, 1000, {.batch_size = 1, .seq_len = 8}), InputError);
}

}  // namespace
}  // namespace retort::data
