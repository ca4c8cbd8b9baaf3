// The teacher top-k pipeline end to end: token shards on disk, a fake teacher whose vocab-sharded logits are
// known in float64, tp 1, 2 and 4 as Gloo thread ranks. Every cache row must hold the dense top-k ids of its
// position and their float64 log-softmax values; a run interrupted mid-way resumes to byte-identical shards;
// bad settings are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "core/data/token_shard.h"
#include "distill/cache/teacher_topk.h"
#include "parallel/comm/thread_ranks.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kTokenVocab = 32;    // the dataset's tokenizer
constexpr int64_t kTeacherVocab = 48;  // the teacher's output vocabulary
constexpr int64_t kSeq = 8;

// logits(token, t, v): a table row per input token plus a position-dependent term, rounded to f32 (what the
// teacher hands over).
double logit(int32_t token, int64_t t, int64_t v) {
  static const std::vector<double> table = [] {
    std::mt19937 gen(99);
    std::normal_distribution<double> normal(0.0, 2.0);
    std::vector<double> values(static_cast<size_t>(kTokenVocab * kTeacherVocab));
    for (auto& x : values) x = normal(gen);
    return values;
  }();
  return static_cast<float>(table[static_cast<size_t>(token * kTeacherVocab + v)] +
                            0.25 * static_cast<double>(t) * static_cast<double>((v * 7) % 5 - 2));
}

struct Data {
  std::vector<int32_t> tokens;  // the whole stream
  TeacherTopKDataset dataset;
};

// Two shards of 50 and 37 tokens: 87 tokens, 10 windows of 8, so the cache covers 80 positions and one window
// crosses the shard border.
Data make_data(const fs::path& dir) {
  Data d;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> id(0, kTokenVocab - 1);
  const int64_t sizes[] = {50, 37};
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> shard(static_cast<size_t>(sizes[s]));
    for (auto& t : shard) t = id(gen);
    const fs::path path = dir / ("tokens_" + std::to_string(s) + ".bin");
    data::write_token_shard(path, shard, kTokenVocab);
    d.tokens.insert(d.tokens.end(), shard.begin(), shard.end());
    d.dataset.shards.push_back(path);
  }
  d.dataset.vocab_size = kTokenVocab;
  return d;
}

// The fake teacher on one rank: logits [B, T, V / tp] of columns [rank V/tp, (rank + 1) V/tp), marked as split
// over the group.
TeacherLogitsFn fake_teacher(std::shared_ptr<Communicator> group, int* calls, int fail_at_call = -1) {
  return [group, calls, fail_at_call](const Tensor& tokens) {
    if (calls && ++*calls == fail_at_call) throw Error("teacher interrupted (test)");
    const int tp = group ? group->size() : 1, rank = group ? group->rank() : 0;
    const int64_t B = tokens.size(0), T = tokens.size(1), local = kTeacherVocab / tp;
    const std::vector<int32_t> ids = tokens.to_ints();
    std::vector<double> values;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t v = rank * local; v < (rank + 1) * local; ++v)
          values.push_back(logit(ids[static_cast<size_t>(b * T + t)], t, v));
    Tensor logits = Tensor::from_doubles(values, {B, T, local}, DType::F32);
    if (group) logits.set_sharding({2, 1, group});
    return logits;
  };
}

TeacherTopKOptions make_options(const fs::path& out, CacheValueType dtype) {
  TeacherTopKOptions o;
  o.k = 6;
  o.dtype = dtype;
  o.batch_size = 3;  // windows in batches of 3, 3, 3, 1
  o.seq_len = kSeq;
  o.output_dir = out;
  o.shard_tokens = 12;  // not a multiple of the window: a resume restarts inside a window
  o.tokenizer_id = "test-tokenizer";
  o.vocab = kTeacherVocab;
  o.log_every = 2;
  return o;
}

void run_pipeline(int tp, const TeacherTopKOptions& base, const Data& data, int fail_at_call = -1) {
  run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
    TeacherTopKOptions options = base;
    options.group = tp > 1 ? comm : nullptr;
    int calls = 0;
    generate_teacher_topk(fake_teacher(options.group, &calls, fail_at_call), data.dataset, options);
  });
}

void expect_cache_matches_dense(const fs::path& dir, const Data& data, CacheValueType dtype) {
  const TopKCacheReader reader = TopKCacheReader::open(
      dir, {.k = 6, .tokenizer_id = std::string("test-tokenizer"), .dataset = dataset_identity(data.tokens)});
  ASSERT_EQ(reader.tokens(), 80);
  const TopKRows rows = reader.rows(0, 80);
  const std::vector<int32_t> indices = rows.indices.to_ints();
  const std::vector<float> logprobs = rows.logprobs.to_floats(), lse = rows.lse.to_floats();
  const double tolerance = dtype == CacheValueType::F32 ? 2e-5 : 0.1;  // bf16 keeps 8 bits: |lp| < 25 -> < 0.1
  for (int64_t p = 0; p < 80; ++p) {
    const int64_t t = p % kSeq;
    std::vector<double> row(kTeacherVocab);
    for (int64_t v = 0; v < kTeacherVocab; ++v) row[static_cast<size_t>(v)] = logit(data.tokens[p], t, v);
    const double m = *std::max_element(row.begin(), row.end());
    double s = 0;
    for (double x : row) s += std::exp(x - m);
    const double row_lse = m + std::log(s);
    std::vector<int32_t> order(kTeacherVocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    EXPECT_NEAR(lse[p], row_lse, 2e-5) << "position " << p;
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(indices[p * 6 + i], order[i]) << "position " << p << " entry " << i;
      EXPECT_NEAR(logprobs[p * 6 + i], row[order[i]] - row_lse, tolerance) << "position " << p << " entry " << i;
    }
  }
}

TEST(TeacherTopK, CacheHoldsTheDenseTopKAtEveryTpSize) {
  testing::TempFolder folder;
  const Data data = make_data(folder.path());
  for (int tp : {1, 2, 4}) {
    const fs::path out = folder.path() / ("cache_tp" + std::to_string(tp));
    run_pipeline(tp, make_options(out, CacheValueType::F32), data);
    expect_cache_matches_dense(out, data, CacheValueType::F32);
  }
  const fs::path bf16 = folder.path() / "cache_bf16";
  run_pipeline(2, make_options(bf16, CacheValueType::BF16), data);
  expect_cache_matches_dense(bf16, data, CacheValueType::BF16);
}

TEST(TeacherTopK, AnInterruptedRunResumesToTheSameBytes) {
  testing::TempFolder folder;
  const Data data = make_data(folder.path());
  const fs::path whole = folder.path() / "whole", resumed = folder.path() / "resumed";
  for (int tp : {1, 2}) {
    // Against an uninterrupted run at the same tp size (the lse of another tp size may differ in its last bit).
    fs::remove_all(whole);
    fs::remove_all(resumed);
    run_pipeline(tp, make_options(whole, CacheValueType::BF16), data);
    // The third teacher call fails: windows 0..5 are done (48 rows), so shards 0..3 (rows 0..47) are on disk.
    EXPECT_THROW(run_pipeline(tp, make_options(resumed, CacheValueType::BF16), data, 3), Error);
    EXPECT_TRUE(fs::exists(resumed / topk_shard_file_name(3)));
    EXPECT_FALSE(fs::exists(resumed / topk_shard_file_name(4)));
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      TeacherTopKOptions options = make_options(resumed, CacheValueType::BF16);
      options.group = tp > 1 ? comm : nullptr;
      int calls = 0;
      const TeacherTopKReport report =
          generate_teacher_topk(fake_teacher(options.group, &calls), data.dataset, options);
      EXPECT_EQ(report.resumed_tokens, 48);
      EXPECT_EQ(report.computed_tokens, 32);
      EXPECT_EQ(calls, 2);  // windows 6..8 and 9
    });
    for (int i = 0; i < 7; ++i) {
      const std::string name = topk_shard_file_name(i);
      EXPECT_EQ(testing::read_bytes(resumed / name), testing::read_bytes(whole / name)) << "tp " << tp << " " << name;
    }
  }
}

TEST(TeacherTopK, BadSettingsAreErrors) {
  testing::TempFolder folder;
  const Data data = make_data(folder.path());
  TeacherTopKOptions options = make_options(folder.path() / "out", CacheValueType::F32);
  options.seq_len = 100;
  EXPECT_NE(testing::message_of([&] {
              generate_teacher_topk(fake_teacher(nullptr, nullptr), data.dataset, options);
            }).find("fewer than one window of seq_len = 100"),
            std::string::npos);
  options = make_options(folder.path() / "out", CacheValueType::F32);
  options.vocab = 50;
  EXPECT_NE(testing::message_of([&] {
              generate_teacher_topk(fake_teacher(nullptr, nullptr), data.dataset, options);
            }).find("make a vocabulary of 48, but the options say 50"),
            std::string::npos);
  EXPECT_NE(testing::message_of([&] {
              generate_teacher_topk(fake_teacher(nullptr, nullptr), TeacherTopKDataset{{}, kTokenVocab},
                                    make_options(folder.path() / "out", CacheValueType::F32));
            }).find("no token shards"),
            std::string::npos);
}

}  // namespace
}  // namespace retort::distill
