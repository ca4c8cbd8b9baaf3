// The vocab-parallel sampler of sampled-logit KD (distill/cache/teacher_sample.h): the ids drawn follow the proposal
// p^(1/t) (a chi-square bound over many draws, at tp 1, 2 and 4 on Gloo thread ranks, which must also reject the
// untempered p), tp 2 and 4 draw the same ids as tp 1 (the uniforms invert one CDF in rank order), the importance
// log-ratios are log p - log r in float64, and a row's slots are distinct ids whose counts add up to K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/tensor/device.h"
#include "core/util/error.h"
#include "distill/cache/teacher_sample.h"
#include "parallel/comm/thread_ranks.h"

namespace retort::distill {
namespace {

constexpr int64_t kVocab = 24;

// Teacher logits of one row, rounded to f32 (what the sampler reads).
std::vector<double> teacher_logits(uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.3);
  std::vector<double> x(kVocab);
  for (auto& v : x) v = static_cast<float>(normal(gen));
  return x;
}

// softmax(x / tau) in float64.
std::vector<double> softmax(const std::vector<double>& x, double tau) {
  const double m = *std::max_element(x.begin(), x.end()) / tau;
  double s = 0;
  for (double v : x) s += std::exp(v / tau - m);
  std::vector<double> p;
  for (double v : x) p.push_back(std::exp(v / tau - m) / s);
  return p;
}

// The same row at `rows` positions, sampled on `tp` ranks; rank 0's result (every rank holds the same).
VocabSample sample_rows(const std::vector<double>& x, int64_t rows, int tp, const VocabSampleOptions& base,
                        int64_t first_position = 0) {
  std::vector<int64_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[static_cast<size_t>(r)] = first_position + r;
  const int64_t local = kVocab / tp;
  std::vector<VocabSample> results(static_cast<size_t>(tp));
  auto body = [&](std::shared_ptr<Communicator> group) {
    const int rank = group ? group->rank() : 0;
    std::vector<double> values;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = rank * local; j < (rank + 1) * local; ++j) values.push_back(x[static_cast<size_t>(j)]);
    VocabSampleOptions o = base;
    o.group = group;
    results[static_cast<size_t>(rank)] =
        sample_vocab(Tensor::from_doubles(values, {rows, local}, DType::F32), positions, o);
  };
  if (tp == 1) {
    body(nullptr);
  } else {
    run_ranks(tp, body);
  }
  for (int r = 1; r < tp; ++r) {
    EXPECT_EQ(results[static_cast<size_t>(r)].indices, results[0].indices) << "rank " << r;
    EXPECT_EQ(results[static_cast<size_t>(r)].counts, results[0].counts) << "rank " << r;
  }
  return results[0];
}

std::vector<double> frequencies(const VocabSample& s) {
  std::vector<double> counts(kVocab, 0.0);
  for (size_t i = 0; i < s.indices.size(); ++i) counts[static_cast<size_t>(s.indices[i])] += s.counts[i];
  return counts;
}

double chi_square(const std::vector<double>& observed, const std::vector<double>& probabilities, double draws) {
  double chi2 = 0;
  for (size_t j = 0; j < observed.size(); ++j) {
    const double expected = draws * probabilities[j];
    chi2 += (observed[j] - expected) * (observed[j] - expected) / expected;
  }
  return chi2;
}

TEST(TeacherSample, FrequenciesFollowTheTemperedTeacherAtEveryTpSize) {
  const std::vector<double> x = teacher_logits(7);
  const int64_t rows = 3000;
  const int K = 8;
  const double dof = kVocab - 1, bound = dof + 6 * std::sqrt(2 * dof);  // mean dof, sd sqrt(2 dof)
  for (double t : {1.0, 0.5, 2.0}) {
    const std::vector<double> r = softmax(x, t);
    for (int tp : {1, 2, 4}) {
      const VocabSample s = sample_rows(x, rows, tp, {.draws = K, .proposal_temperature = t, .seed = 5});
      const std::vector<double> observed = frequencies(s);
      EXPECT_LT(chi_square(observed, r, rows * K), bound) << "t " << t << " tp " << tp;
      // The same statistic would catch a sampler that ignored the proposal temperature.
      if (t != 1.0) {
        EXPECT_GT(chi_square(observed, softmax(x, 1.0), rows * K), 10 * bound) << "t " << t;
      }
    }
  }
}

TEST(TeacherSample, EveryTpSizeDrawsTheSameIdsWithTheirLogRatios) {
  const std::vector<double> x = teacher_logits(8);
  const double T = 1.5, t = 0.7;
  const VocabSampleOptions o{.draws = 6, .temperature = T, .proposal_temperature = t, .seed = 99};
  const VocabSample one = sample_rows(x, 200, 1, o, 1000);
  const std::vector<double> p = softmax(x, T), r = softmax(x, T * t);
  double lse = 0;
  for (double v : x) lse += std::exp(v / T);
  lse = std::log(lse);
  for (int tp : {2, 4}) {
    const VocabSample split = sample_rows(x, 200, tp, o, 1000);
    int64_t same = 0;
    for (int64_t row = 0; row < 200; ++row)
      same += std::equal(one.indices.begin() + row * 6, one.indices.begin() + (row + 1) * 6,
                         split.indices.begin() + row * 6);
    EXPECT_GE(same, 198) << "tp " << tp << ": the draws should differ only by float rounding at shard borders";
  }
  for (int64_t row = 0; row < 200; ++row) {
    EXPECT_NEAR(one.lse[static_cast<size_t>(row)], lse, 1e-5);
    std::set<int32_t> ids;
    int total = 0;
    for (int64_t i = 0; i < 6; ++i) {
      const size_t at = static_cast<size_t>(row * 6 + i);
      const int32_t id = one.indices[at];
      ASSERT_TRUE(id >= 0 && id < kVocab);
      ids.insert(id);
      total += one.counts[at];
      if (one.counts[at] > 0) {
        EXPECT_NEAR(one.log_ratios[at], std::log(p[static_cast<size_t>(id)] / r[static_cast<size_t>(id)]), 1e-5);
      }
    }
    EXPECT_EQ(ids.size(), 6u) << "row " << row << ": slots must hold distinct ids";
    EXPECT_EQ(total, 6) << "row " << row;
  }
}

TEST(TeacherSample, DrawsDependOnlyOnTheSeedAndThePosition) {
  const std::vector<double> x = teacher_logits(9);
  const VocabSample whole = sample_rows(x, 40, 1, {.draws = 5, .seed = 3});
  const VocabSample tail = sample_rows(x, 10, 1, {.draws = 5, .seed = 3}, 30);
  EXPECT_TRUE(std::equal(tail.indices.begin(), tail.indices.end(), whole.indices.begin() + 30 * 5));
  const VocabSample other_seed = sample_rows(x, 40, 1, {.draws = 5, .seed = 4});
  EXPECT_NE(other_seed.indices, whole.indices);
}

// Logits on the GPU are read on the host: the same draws as from the same logits on the CPU.
TEST(TeacherSample, LogitsOnTheGpuGiveTheSameDraws) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<double> x = teacher_logits(10);
  std::vector<double> values;
  std::vector<int64_t> positions;
  for (int64_t r = 0; r < 64; ++r) values.insert(values.end(), x.begin(), x.end()), positions.push_back(r);
  const Tensor logits = Tensor::from_doubles(values, {64, kVocab}, DType::F32);
  const VocabSampleOptions o{.draws = 8, .temperature = 1.3, .proposal_temperature = 1.5, .seed = 1};
  const VocabSample cpu = sample_vocab(logits, positions, o);
  const VocabSample gpu = sample_vocab(logits.to(Device::cuda(0)), positions, o);
  EXPECT_EQ(gpu.indices, cpu.indices);
  EXPECT_EQ(gpu.counts, cpu.counts);
  EXPECT_EQ(gpu.log_ratios, cpu.log_ratios);
}

TEST(TeacherSample, BadSettingsAreErrors) {
  const Tensor logits = Tensor::from_doubles(std::vector<double>(2 * kVocab, 0.0), {2, kVocab}, DType::F32);
  const std::vector<int64_t> positions{0, 1};
  EXPECT_THROW(sample_vocab(logits, positions, {.draws = 0}), InputError);
  EXPECT_THROW(sample_vocab(logits, positions, {.draws = 4, .proposal_temperature = 0}), InputError);
  EXPECT_THROW(sample_vocab(logits, std::vector<int64_t>{0}, {.draws = 4}), InputError);
  EXPECT_THROW(sample_vocab(logits, positions, {.draws = kVocab + 1}), InputError);
}

}  // namespace
}  // namespace retort::distill
