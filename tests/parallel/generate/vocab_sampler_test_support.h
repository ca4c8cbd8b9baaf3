#pragma once
// Shared by the sampler tests (CPU, tensor-parallel and CUDA): the float64 reference of the sampling
// distribution under temperature, top-k and top-p, a chi-square goodness-of-fit check with a fixed bound, and
// draws of many samples of one row of logits (one row per draw, each with its own key).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "parallel/generate/vocab_sampler.h"

namespace retort::sampler_testing {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Sampling probabilities of every token of one row of logits, written from the definitions: the k largest logits
// (a stable sort: ties to the smaller id), softmax(logits / T) over them, then the smallest prefix of that order
// whose probability reaches top_p, extended over ties with its last token, renormalised. 0 outside the set.
struct Reference {
  std::vector<double> probs;
  int support = 0;
  // The smallest |cumulative probability - top_p| over the prefixes: the nucleus is only well defined (and a
  // test of it only fair) when this is far above float rounding.
  double nucleus_margin = kInf;
};

inline Reference reference_distribution(const std::vector<double>& logits, double temperature, int top_k,
                                        double top_p) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<int> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int kept = top_k > 0 ? std::min(top_k, vocab) : vocab;
  const double top = logits[order[0]];
  std::vector<double> weight(static_cast<size_t>(vocab), 0.0);
  double total = 0;
  for (int i = 0; i < kept; ++i) total += weight[order[i]] = std::exp((logits[order[i]] - top) / temperature);
  Reference ref;
  if (top_p < 1) {
    double cumulative = 0;
    int last = -1;
    for (int i = 0; i < kept; ++i) {
      cumulative += weight[order[i]] / total;
      ref.nucleus_margin = std::min(ref.nucleus_margin, std::abs(cumulative - top_p));
      if (last < 0 && cumulative >= top_p) last = i;
    }
    while (last + 1 < kept && logits[order[last + 1]] == logits[order[last]]) ++last;
    kept = last + 1;
    total = 0;
    for (int i = 0; i < kept; ++i) total += weight[order[i]];
  }
  ref.probs.assign(static_cast<size_t>(vocab), 0.0);
  for (int i = 0; i < kept; ++i) {
    ref.probs[order[i]] = weight[order[i]] / total;
    if (ref.probs[order[i]] > 0) ++ref.support;
  }
  return ref;
}

// Pearson's chi-square of observed counts against probabilities, cells with an expected count below 5 pooled into
// one. A count on a token of probability 0 makes it infinite (a token outside the allowed set).
struct ChiSquare {
  double statistic = 0;
  int dof = 0;
};

inline ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  const double draws = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  ChiSquare chi;
  double pooled_observed = 0, pooled_expected = 0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = draws * probs[i], observed = static_cast<double>(counts[i]);
    if (probs[i] == 0) {
      if (counts[i] > 0) return {kInf, 0};
      continue;
    }
    if (expected < 5) {
      pooled_observed += observed;
      pooled_expected += expected;
      continue;
    }
    chi.statistic += (observed - expected) * (observed - expected) / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    chi.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  chi.dof = std::max(cells - 1, 0);
  return chi;
}

// The chi-square quantile at about 1 - 3e-7 (Wilson-Hilferty with z = 5): a correct sampler exceeds it about
// once in three million runs, so a fixed-seed test never flakes, yet a wrong temperature or a wrong nucleus
// lands far above it (each test shows that on the same counts).
inline double chi_square_bound(int dof) {
  if (dof <= 0) return 1e-9;
  const double d = dof, c = 2.0 / (9.0 * d);
  return d * std::pow(1.0 - c + 5.0 * std::sqrt(c), 3);
}

// Per-token counts of `draws` samples of one row: the row repeated in batches, every draw with its own key.
inline std::vector<int64_t> draw_counts(const std::vector<double>& logits, DType dtype, Device device,
                                        const generate::SamplingOptions& options, int64_t draws,
                                        uint64_t first_key = 0) {
  const int64_t vocab = static_cast<int64_t>(logits.size()), batch = 8192;
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (int64_t start = 0; start < draws; start += batch) {
    const int64_t rows = std::min(batch, draws - start);
    std::vector<double> repeated;
    repeated.reserve(static_cast<size_t>(rows * vocab));
    for (int64_t r = 0; r < rows; ++r) repeated.insert(repeated.end(), logits.begin(), logits.end());
    std::vector<uint64_t> keys(static_cast<size_t>(rows));
    std::iota(keys.begin(), keys.end(), first_key + static_cast<uint64_t>(start));
    const Tensor x = Tensor::from_doubles(repeated, {rows, vocab}, DType::F64).to(dtype).to(device);
    for (int32_t token : generate::sample_next_tokens(x, options, keys)) {
      EXPECT_TRUE(token >= 0 && token < vocab) << "token " << token;
      if (token >= 0 && token < vocab) ++counts[static_cast<size_t>(token)];
    }
  }
  return counts;
}

// Logits rounded to what `dtype` stores, so the reference sees exactly what the sampler reads.
inline std::vector<double> stored(const std::vector<double>& logits, DType dtype) {
  return Tensor::from_doubles(logits, {static_cast<int64_t>(logits.size())}, DType::F64).to(dtype).to_doubles();
}

// A row with structure every option meets: normal logits (scale 1.5), a pair of tied tokens, tokens at -inf.
inline std::vector<double> structured_row(int vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.5);
  std::vector<double> row(static_cast<size_t>(vocab));
  for (double& x : row) x = static_cast<float>(normal(gen));
  row[3] = row[vocab - 2];  // a tie across the row
  row[5] = -kInf;
  row[vocab / 2] = -kInf;
  return row;
}

struct DistributionCase {
  double temperature;
  int top_k;
  double top_p;
  std::string describe() const {
    return "T " + std::to_string(temperature) + " top_k " + std::to_string(top_k) + " top_p " + std::to_string(top_p);
  }
};

// Draws from the sampler and checks the support and the frequencies against the reference; then checks that the
// same counts reject a deliberately wrong distribution (a temperature 25% off, a nucleus or top-k one token
// shorter or longer), so the bound is tight enough to catch those mistakes.
inline void expect_distribution(const std::vector<double>& raw_logits, DType dtype, Device device,
                                const DistributionCase& c, int64_t draws, uint64_t seed) {
  const std::vector<double> logits = stored(raw_logits, dtype);
  const std::string what = c.describe() + " " + std::string(dtype_name(dtype)) + " on " + device.str();
  const Reference want = reference_distribution(logits, c.temperature, c.top_k, c.top_p);
  ASSERT_GT(want.nucleus_margin, 1e-4) << what << ": top_p sits on a cumulative boundary; pick another";
  const std::vector<int64_t> counts =
      draw_counts(logits, dtype, device, {c.temperature, c.top_k, c.top_p, seed}, draws);

  for (size_t v = 0; v < counts.size(); ++v)
    EXPECT_FALSE(counts[v] > 0 && want.probs[v] == 0) << what << ": token " << v << " is outside the allowed set";
  const ChiSquare chi = chi_square(counts, want.probs);
  EXPECT_LE(chi.statistic, chi_square_bound(chi.dof)) << what << " (" << chi.dof << " dof)";

  std::vector<std::pair<std::string, Reference>> wrong;
  wrong.emplace_back("temperature x 1.25", reference_distribution(logits, c.temperature * 1.25, c.top_k, c.top_p));
  if (c.top_k > 1) wrong.emplace_back("top_k - 1", reference_distribution(logits, c.temperature, c.top_k - 1, c.top_p));
  if (c.top_k > 0) wrong.emplace_back("top_k + 1", reference_distribution(logits, c.temperature, c.top_k + 1, c.top_p));
  if (c.top_p < 1) {
    Reference shorter = want, longer = want;
    // Shorter: drop the least likely kept token. Longer: add the most likely excluded one.
    int drop = -1, add = -1;
    for (size_t v = 0; v < want.probs.size(); ++v) {
      if (want.probs[v] > 0 && (drop < 0 || want.probs[v] < want.probs[static_cast<size_t>(drop)]))
        drop = static_cast<int>(v);
    }
    const Reference unrestricted = reference_distribution(logits, c.temperature, c.top_k, 1.0);
    for (size_t v = 0; v < want.probs.size(); ++v) {
      if (want.probs[v] == 0 && unrestricted.probs[v] > 0 &&
          (add < 0 || unrestricted.probs[v] > unrestricted.probs[static_cast<size_t>(add)]))
        add = static_cast<int>(v);
    }
    auto renormalised = [&](std::vector<double> p) {
      const double s = std::accumulate(p.begin(), p.end(), 0.0);
      for (double& x : p) x /= s;
      return p;
    };
    if (want.support > 1) {
      shorter.probs[static_cast<size_t>(drop)] = 0;
      shorter.probs = renormalised(shorter.probs);
      wrong.emplace_back("nucleus one token shorter", shorter);
    }
    if (add >= 0) {
      longer.probs = unrestricted.probs;
      for (size_t v = 0; v < longer.probs.size(); ++v)
        if (want.probs[v] == 0 && static_cast<int>(v) != add) longer.probs[v] = 0;
      longer.probs = renormalised(longer.probs);
      wrong.emplace_back("nucleus one token longer", longer);
    }
  }
  for (const auto& [name, ref] : wrong) {
    if (ref.probs == want.probs) continue;
    const ChiSquare bad = chi_square(counts, ref.probs);
    EXPECT_GT(bad.statistic, chi_square_bound(bad.dof)) << what << ": the bound does not reject " << name;
  }
}

}  // namespace retort::sampler_testing
