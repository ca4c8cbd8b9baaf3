// The vocab-parallel sampler on the CPU: frequencies of many draws against the float64 reference distribution
// (temperature, top-k, top-p and their combinations, f32 and bf16, ties and -inf entries) with a chi-square bound
// that each case also shows to reject a wrong temperature and a nucleus or top-k off by one token; the exact
// edges (greedy, top_k 1, a tiny top_p, ties, a single finite token); determinism (same seed and keys, another
// seed, a row alone or shuffled within its batch); tp 1, 2 and 4 as Gloo thread ranks giving every rank the
// dense result for every option combination; and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "parallel/comm/thread_ranks.h"
#include "parallel/generate/vocab_sampler.h"
#include "parallel/tp/sharding.h"
#include "tests/parallel/generate/vocab_sampler_test_support.h"
#include "tests/parallel/tp/tp_test_support.h"
#include "tests/test_support.h"

namespace retort::sampler_testing {
namespace {

using generate::sample_next_tokens;
using generate::SamplingOptions;

const Device kCpu = Device::cpu();

// Rows of normal logits (scale 3), on a few levels where `ties` (ties everywhere, also across shard borders), a
// fifth of them -inf but never a whole row.
std::vector<double> random_logits(int64_t rows, int64_t vocab, bool ties, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> level(-3, 3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < vocab; ++j) {
      double x = ties ? level(gen) : static_cast<float>(normal(gen));
      if (j != r % vocab && u(gen) < 0.2) x = -kInf;
      v[static_cast<size_t>(r * vocab + j)] = x;
    }
  return v;
}

std::vector<uint64_t> random_keys(int64_t rows, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint64_t> keys(static_cast<size_t>(rows));
  for (auto& k : keys) k = gen();
  return keys;
}

// Argmax of every row, ties to the smaller id.
std::vector<int32_t> dense_argmax(const std::vector<double>& logits, int64_t rows, int64_t vocab) {
  std::vector<int32_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    const auto begin = logits.begin() + r * vocab;
    out.push_back(static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin));
  }
  return out;
}

// ---- distributions -------------------------------------------------------------------------------------------

const DistributionCase kCases[] = {
    {1.0, 0, 1.0},  {0.7, 0, 1.0},  {1.6, 0, 1.0},   // temperature alone
    {1.0, 5, 1.0},  {0.8, 12, 1.0},                  // top-k
    {1.0, 0, 0.8},  {0.6, 0, 0.9},  {1.3, 0, 0.5},   // top-p (after temperature)
    {1.0, 10, 0.7}, {0.9, 3, 0.95}, {2.0, 20, 0.6},  // top-k then top-p
};

TEST(VocabSampler, FrequenciesMatchTheFloat64Reference) {
  const std::vector<double> row = structured_row(40, 11);
  for (const DistributionCase& c : kCases) expect_distribution(row, DType::F32, kCpu, c, 40000, 1234);
}

TEST(VocabSampler, FrequenciesMatchTheReferenceOnBf16Logits) {
  const std::vector<double> row = structured_row(40, 23);
  for (const DistributionCase& c :
       {DistributionCase{1.0, 0, 1.0}, DistributionCase{0.8, 0, 0.85}, DistributionCase{1.2, 8, 0.9}})
    expect_distribution(row, DType::BF16, kCpu, c, 40000, 99);
}

// ---- exact edges ---------------------------------------------------------------------------------------------

TEST(VocabSampler, TemperatureZeroIsTheArgmaxWhateverTheOtherOptions) {
  const int64_t rows = 64, vocab = 50;
  for (bool ties : {false, true})
    for (DType dtype : {DType::F32, DType::BF16}) {
      const std::vector<double> logits = random_logits(rows, vocab, ties, 5);
      const Tensor x = Tensor::from_doubles(logits, {rows, vocab}, DType::F64).to(dtype);
      const std::vector<int32_t> want = dense_argmax(x.to_doubles(), rows, vocab);
      for (const SamplingOptions& options : {SamplingOptions{0.0, 0, 1.0, 1}, SamplingOptions{0.0, 7, 0.5, 2}})
        EXPECT_EQ(sample_next_tokens(x, options, random_keys(rows, 3)), want)
            << (ties ? "ties " : "") << dtype_name(dtype) << " top_k " << options.top_k;
    }
}

TEST(VocabSampler, TopKOneAndATinyTopPAreTheArgmax) {
  const int64_t rows = 256, vocab = 50;
  const std::vector<double> logits = random_logits(rows, vocab, false, 8);  // no ties at the top
  const Tensor x = Tensor::from_doubles(logits, {rows, vocab}, DType::F64).to(DType::F32);
  const std::vector<int32_t> want = dense_argmax(logits, rows, vocab);
  for (double temperature : {0.3, 1.0, 5.0}) {
    EXPECT_EQ(sample_next_tokens(x, {temperature, 1, 1.0, 4}, random_keys(rows, 5)), want)
        << "top_k 1 T " << temperature;
    EXPECT_EQ(sample_next_tokens(x, {temperature, 0, 1e-9, 4}, random_keys(rows, 6)), want)
        << "top_p 1e-9 T " << temperature;
    EXPECT_EQ(sample_next_tokens(x, {temperature, 9, 1e-9, 4}, random_keys(rows, 7)), want) << "top_k 9 top_p 1e-9";
  }
}

TEST(VocabSampler, TiesShareTheirMassAndTinyTopPKeepsEveryTiedMaximum) {
  // Tokens 2 and 7 tie at the maximum: a tiny top_p keeps both (the tokens tied with the nucleus' last one stay)
  // and they come out about equally often; nothing else ever does.
  std::vector<double> row(12, -1.0);
  row[2] = row[7] = 2.0;
  row[4] = 1.5;
  for (const SamplingOptions& options : {SamplingOptions{1.0, 0, 1e-6, 17}, SamplingOptions{1.0, 5, 1e-6, 17}}) {
    const std::vector<int64_t> counts = draw_counts(row, DType::F32, kCpu, options, 20000);
    EXPECT_EQ(counts[2] + counts[7], 20000) << "top_k " << options.top_k;
    EXPECT_NEAR(static_cast<double>(counts[2]) / 20000, 0.5, 0.02) << "top_k " << options.top_k;
  }
  // Greedy and top_k 1 pick the smaller id of the tie.
  for (const SamplingOptions& options : {SamplingOptions{0.0, 0, 1.0, 0}, SamplingOptions{1.0, 1, 1.0, 0}})
    EXPECT_EQ(draw_counts(row, DType::F32, kCpu, options, 100)[2], 100);
}

TEST(VocabSampler, OneFiniteTokenIsAlwaysPicked) {
  std::vector<double> row(30, -kInf);
  row[17] = -3.0;
  for (const SamplingOptions& options : {SamplingOptions{1.0, 0, 1.0, 1}, SamplingOptions{2.0, 4, 1.0, 1},
                                         SamplingOptions{0.5, 0, 0.5, 1}, SamplingOptions{1.0, 0, 1.0, 1}})
    EXPECT_EQ(draw_counts(row, DType::F32, kCpu, options, 2000)[17], 2000);
}

TEST(VocabSampler, ExtremeTemperaturesStayExact) {
  // A tiny temperature is greedy (noise T g falls below the logits' spacing), a huge one uniform over the finite
  // tokens; neither overflows.
  std::vector<double> row = {0.0, 1.0, -kInf, 0.5, 1.0 - 1.0 / 64};
  EXPECT_EQ(draw_counts(row, DType::F32, kCpu, {1e-30, 0, 1.0, 3}, 1000)[1], 1000);
  EXPECT_EQ(draw_counts(row, DType::F32, kCpu, {1e-30, 0, 0.99, 3}, 1000)[1], 1000);
  const std::vector<int64_t> uniform = draw_counts(row, DType::F32, kCpu, {1e30, 0, 1.0, 3}, 40000);
  EXPECT_EQ(uniform[2], 0);
  std::vector<double> quarter = {0.25, 0.25, 0.0, 0.25, 0.25};
  const ChiSquare chi = chi_square(uniform, quarter);
  EXPECT_LE(chi.statistic, chi_square_bound(chi.dof));
}

// ---- determinism -----------------------------------------------------------------------------------------------

TEST(VocabSampler, SameSeedAndKeysGiveTheSameTokensAnotherSeedOthers) {
  const int64_t rows = 2000, vocab = 40;
  std::vector<double> logits;
  const std::vector<double> row = structured_row(static_cast<int>(vocab), 3);
  for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const Tensor x = Tensor::from_doubles(logits, {rows, vocab}, DType::F32);
  const std::vector<uint64_t> keys = random_keys(rows, 1);
  for (const SamplingOptions& options :
       {SamplingOptions{1.0, 0, 1.0, 42}, SamplingOptions{0.8, 10, 1.0, 42}, SamplingOptions{1.0, 0, 0.9, 42}}) {
    const std::vector<int32_t> first = sample_next_tokens(x, options, keys);
    EXPECT_EQ(sample_next_tokens(x, options, keys), first);
    SamplingOptions other = options;
    other.seed = 43;
    const std::vector<int32_t> reseeded = sample_next_tokens(x, other, keys);
    std::vector<uint64_t> other_keys = keys;
    for (auto& k : other_keys) k += 1;
    const std::vector<int32_t> rekeyed = sample_next_tokens(x, options, other_keys);
    int64_t same_seed = 0, same_key = 0;
    for (int64_t r = 0; r < rows; ++r) {
      same_seed += reseeded[static_cast<size_t>(r)] == first[static_cast<size_t>(r)];
      same_key += rekeyed[static_cast<size_t>(r)] == first[static_cast<size_t>(r)];
    }
    // Two independent draws agree with probability sum_v p_v^2 (< 0.2 for these rows): far below 40%.
    EXPECT_LT(same_seed, rows * 2 / 5) << "seed 43 vs 42";
    EXPECT_LT(same_key, rows * 2 / 5) << "keys + 1";
  }
}

TEST(VocabSampler, ARowsTokenDoesNotDependOnTheOtherRows) {
  const int64_t rows = 48, vocab = 64;
  const std::vector<double> logits = random_logits(rows, vocab, false, 21);
  const std::vector<uint64_t> keys = random_keys(rows, 9);
  std::vector<int64_t> perm(static_cast<size_t>(rows));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(4));
  std::vector<double> shuffled_logits;
  std::vector<uint64_t> shuffled_keys;
  for (int64_t p : perm) {
    shuffled_logits.insert(shuffled_logits.end(), logits.begin() + p * vocab, logits.begin() + (p + 1) * vocab);
    shuffled_keys.push_back(keys[static_cast<size_t>(p)]);
  }
  const Tensor x = Tensor::from_doubles(logits, {rows, vocab}, DType::F32);
  const Tensor shuffled = Tensor::from_doubles(shuffled_logits, {rows, vocab}, DType::F32);
  for (const SamplingOptions& options : {SamplingOptions{1.0, 0, 1.0, 5}, SamplingOptions{0.7, 6, 1.0, 5},
                                         SamplingOptions{1.2, 0, 0.6, 5}, SamplingOptions{1.0, 12, 0.8, 5}}) {
    const std::vector<int32_t> batch = sample_next_tokens(x, options, keys);
    const std::vector<int32_t> permuted = sample_next_tokens(shuffled, options, shuffled_keys);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t p = perm[static_cast<size_t>(i)];
      EXPECT_EQ(permuted[static_cast<size_t>(i)], batch[static_cast<size_t>(p)]) << "shuffled row " << i;
      if (i % 8 == 0) {  // and alone
        const Tensor alone = x.rows(p, 1).clone();
        EXPECT_EQ(sample_next_tokens(alone, options, {keys[static_cast<size_t>(p)]})[0], batch[static_cast<size_t>(p)])
            << "row " << p << " alone";
      }
    }
  }
}

// ---- tensor parallel -----------------------------------------------------------------------------------------

TEST(VocabSampler, EveryTpSizeGivesEveryRankTheDenseTokens) {
  const int64_t rows = 24, vocab = 96;  // 24 columns a shard at tp 4
  std::vector<SamplingOptions> grid;
  for (double temperature : {0.0, 0.8, 1.0, 2.5})
    for (int top_k : {0, 1, 7, 30, 96})  // 30 is more than a shard at tp 4; 96 the whole vocabulary
      for (double top_p : {1.0, 0.9, 0.3}) grid.push_back({temperature, top_k, top_p, 77});
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool ties : {false, true}) {
      const std::vector<double> logits = random_logits(rows, vocab, ties, ties ? 31 : 32);
      const std::vector<uint64_t> keys = random_keys(rows, 12);
      const Tensor dense = Tensor::from_doubles(logits, {rows, vocab}, DType::F64).to(dtype);
      std::vector<std::vector<int32_t>> want;
      for (const SamplingOptions& options : grid) want.push_back(sample_next_tokens(dense, options, keys));
      // The dense greedy result is the float64 argmax: the reference the others are compared through.
      EXPECT_EQ(want[0], dense_argmax(dense.to_doubles(), rows, vocab));
      // top_k = the whole vocabulary runs the candidate path (nucleus by a cumulative sum over the sorted top-k),
      // top_k = 0 the shard passes (nucleus by the radix search): the same sets, so the same tokens.
      for (size_t i = 0; i < grid.size(); ++i)
        if (grid[i].top_k == 96) {
          const size_t unrestricted = i - 4 * 3;  // the same temperature and top_p with top_k 0
          ASSERT_EQ(grid[unrestricted].top_k, 0);
          EXPECT_EQ(want[i], want[unrestricted]) << "T " << grid[i].temperature << " top_p " << grid[i].top_p;
        }
      for (int tp : {2, 4}) {
        run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
          const ShardingSpec spec{1, 1, comm};
          Tensor local =
              tp::shard_of(Tensor::from_doubles(logits, {rows, vocab}, DType::F64), spec, comm->rank(), tp).to(dtype);
          Tensor sharded = local.clone();
          sharded.set_sharding(spec);
          for (size_t i = 0; i < grid.size(); ++i) {
            const std::string what = "tp " + std::to_string(tp) + " rank " + std::to_string(comm->rank()) + " " +
                                     std::string(dtype_name(dtype)) + (ties ? " ties" : "") + " T " +
                                     std::to_string(grid[i].temperature) + " top_k " + std::to_string(grid[i].top_k) +
                                     " top_p " + std::to_string(grid[i].top_p);
            // Through the logits' sharding, and through the explicit group.
            EXPECT_EQ(sample_next_tokens(sharded, grid[i], keys), want[i]) << what;
            if (i % 5 == 0) {
              EXPECT_EQ(sample_next_tokens(local, grid[i], keys, comm), want[i]) << what << " (group)";
            }
          }
        });
      }
    }
}

// A vocabulary of 61 ids (divisible by none of 2, 3, 4) in shards of ceil(61 / tp) columns, the last one ending in
// padding of +1e4 that would take every draw if it were read: every rank draws the dense tokens of the 61 ids.
TEST(VocabSampler, APaddedLastShardIsNeverDrawn) {
  const int64_t rows = 16, vocab = 61;
  const std::vector<double> logits = random_logits(rows, vocab, false, 41);
  const std::vector<uint64_t> keys = random_keys(rows, 5);
  const Tensor dense = Tensor::from_doubles(logits, {rows, vocab}, DType::F64).to(DType::F32);
  const std::vector<SamplingOptions> grid = {{0.0, 0, 1.0, 3}, {1.0, 0, 1.0, 3}, {1.0, 7, 1.0, 3}, {0.8, 0, 0.9, 3}};
  std::vector<std::vector<int32_t>> want;
  for (const SamplingOptions& options : grid) want.push_back(sample_next_tokens(dense, options, keys));
  for (int tp : {2, 3, 4}) {
    const int64_t width = (vocab + tp - 1) / tp;
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      std::vector<double> shard;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = comm->rank() * width; j < (comm->rank() + 1) * width; ++j)
          shard.push_back(j < vocab ? logits[static_cast<size_t>(r * vocab + j)] : 1e4);
      Tensor local = Tensor::from_doubles(shard, {rows, width}, DType::F32);
      local.set_sharding({1, 1, comm, vocab});
      for (size_t i = 0; i < grid.size(); ++i)
        EXPECT_EQ(sample_next_tokens(local, grid[i], keys), want[i])
            << "tp " << tp << " rank " << comm->rank() << " options " << i;
    });
  }
}

TEST(VocabSampler, FrequenciesAtTpTwoMatchTheReference) {
  // The statistical check once more through the collectives (tokens equal the dense ones above; this also covers
  // a row whose most likely tokens sit on different ranks).
  const std::vector<double> row = structured_row(40, 57);
  const DistributionCase c{0.9, 0, 0.8};
  const Reference want = reference_distribution(row, c.temperature, c.top_k, c.top_p);
  const int64_t draws = 20000, vocab = 40;
  std::vector<double> repeated;
  for (int64_t r = 0; r < draws; ++r) repeated.insert(repeated.end(), row.begin(), row.end());
  std::vector<uint64_t> keys(static_cast<size_t>(draws));
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    Tensor local =
        tp::shard_of(Tensor::from_doubles(repeated, {draws, vocab}, DType::F64), {1, 1, comm}, comm->rank(), 2)
            .to(DType::F32);
    const std::vector<int32_t> tokens = sample_next_tokens(local, {c.temperature, c.top_k, c.top_p, 8}, keys, comm);
    if (comm->rank() == 0)
      for (int32_t t : tokens) ++counts[static_cast<size_t>(t)];
  });
  const ChiSquare chi = chi_square(counts, want.probs);
  EXPECT_LE(chi.statistic, chi_square_bound(chi.dof));
}

// ---- bad input -------------------------------------------------------------------------------------------------

TEST(VocabSampler, BadOptionsNameTheOptionAndItsRange) {
  auto message = [](SamplingOptions o) { return testing::message_of([&] { o.validate(); }); };
  for (double t : {-0.5, std::nan(""), kInf})
    EXPECT_NE(message({t, 0, 1.0, 0}).find("temperature = "), std::string::npos) << t;
  EXPECT_NE(message({-0.5, 0, 1.0, 0}).find("must be a finite number >= 0"), std::string::npos);
  for (int k : {-1, 257, 1000})
    EXPECT_NE(message({1.0, k, 1.0, 0}).find("must lie in [0, 256]"), std::string::npos) << k;
  for (double p : {0.0, -0.1, 1.5, std::nan("")})
    EXPECT_NE(message({1.0, 0, p, 0}).find("must lie in (0, 1]"), std::string::npos) << p;
  EXPECT_NO_THROW((SamplingOptions{0.0, 256, 1.0, 0}.validate()));
  EXPECT_NO_THROW((SamplingOptions{3.0, 0, 1e-12, 0}.validate()));
}

TEST(VocabSampler, BadInputIsAnError) {
  const Tensor x = Tensor::zeros({3, 8});
  const std::vector<uint64_t> keys = {1, 2, 3};
  EXPECT_NE(testing::message_of([&] {
              sample_next_tokens(x, {1.0, 300, 1.0, 0}, keys);
            }).find("top_k = 300"),
            std::string::npos);
  for (const Tensor& bad : {Tensor::zeros({8}), Tensor::zeros({3, 2, 8}), Tensor::zeros({3, 0})})
    EXPECT_NE(testing::message_of([&] { sample_next_tokens(bad, {}, keys); }).find("must be 2-D [rows, V_local]"),
              std::string::npos)
        << bad.describe();
  EXPECT_NE(testing::message_of([&] {
              sample_next_tokens(Tensor::zeros({3, 8}, DType::I32), {}, keys);
            }).find("must be f32 or bf16"),
            std::string::npos);
  EXPECT_NE(testing::message_of([&] {
              sample_next_tokens(x, {}, {1, 2});
            }).find("2 row keys for 3 rows"),
            std::string::npos);
  EXPECT_NE(testing::message_of([&] {
              sample_next_tokens(Tensor::zeros({1, (int64_t{1} << 19) + 1}), {}, {1});
            }).find("a vocabulary shard of 524289 tokens is more than the 524288"),
            std::string::npos);

  std::vector<float> values(24, 0.f);
  values[8 + 3] = std::nanf("");
  const Tensor with_nan = Tensor::from_floats(values, {3, 8});
  for (const SamplingOptions& options : {SamplingOptions{0.0, 0, 1.0, 0}, SamplingOptions{1.0, 0, 1.0, 0},
                                         SamplingOptions{1.0, 4, 1.0, 0}, SamplingOptions{1.0, 0, 0.5, 0}})
    EXPECT_NE(
        testing::message_of([&] { sample_next_tokens(with_nan, options, keys); }).find("row 1 of the logits holds NaN"),
        std::string::npos)
        << options.top_k << " " << options.top_p;
  values.assign(24, 0.f);
  for (int j = 16; j < 24; ++j) values[static_cast<size_t>(j)] = -std::numeric_limits<float>::infinity();
  const Tensor masked_row = Tensor::from_floats(values, {3, 8});
  for (const SamplingOptions& options : {SamplingOptions{0.0, 0, 1.0, 0}, SamplingOptions{1.0, 0, 1.0, 0},
                                         SamplingOptions{1.0, 4, 1.0, 0}, SamplingOptions{1.0, 0, 0.5, 0}})
    EXPECT_NE(testing::message_of([&] {
                sample_next_tokens(masked_row, options, keys);
              }).find("every logit of row 2 is -inf"),
              std::string::npos);
  values.assign(24, 0.f);
  values[5] = std::numeric_limits<float>::infinity();
  const Tensor with_inf = Tensor::from_floats(values, {3, 8});
  EXPECT_EQ(sample_next_tokens(with_inf, {0.0, 0, 1.0, 0}, keys)[0], 5);  // greedy takes it
  for (const SamplingOptions& options :
       {SamplingOptions{1.0, 0, 1.0, 0}, SamplingOptions{1.0, 4, 1.0, 0}, SamplingOptions{1.0, 0, 0.5, 0}})
    EXPECT_NE(
        testing::message_of([&] { sample_next_tokens(with_inf, options, keys); }).find("row 0 holds a +inf logit"),
        std::string::npos);

  // An error reaches every rank alike (no rank is left waiting in a collective), and a split on the rows is
  // refused.
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    std::vector<float> v(24, 0.f);
    if (comm->rank() == 1) v[8 + 2] = std::nanf("");  // only rank 1's shard holds the NaN
    Tensor local = Tensor::from_floats(v, {3, 8});
    local.set_sharding({1, 1, comm});
    for (const SamplingOptions& options :
         {SamplingOptions{1.0, 0, 1.0, 0}, SamplingOptions{1.0, 3, 1.0, 0}, SamplingOptions{1.0, 0, 0.5, 0}})
      EXPECT_NE(
          testing::message_of([&] { sample_next_tokens(local, options, keys); }).find("row 1 of the logits holds NaN"),
          std::string::npos);
    Tensor rows_split = Tensor::zeros({3, 8});
    rows_split.set_sharding({0, 1, comm});
    EXPECT_NE(testing::message_of([&] { sample_next_tokens(rows_split, {}, keys); }).find("sharded on dim 0"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace retort::sampler_testing
