// Sampled-logit KD is an unbiased estimate of full KD (docs/distillation.md, "Sampled-logit KD"): the real sampler
// (distill/cache/teacher_sample.h) draws K = 4 ids per row from the teacher's proposal, the real loss
// (losses::TopkDivergence::ForwardKLSampled) turns each row into a gradient in float64, and the mean of 20,000 such
// gradients must equal the full forward KL's gradient q - p within 5 standard errors (from the measured per-coordinate
// variance) plus a small floor for the f32 log-ratios. The same bound must REJECT the estimators that are biased in
// this setup: the top-k cache renormalised (k = K, NeMo RL's default), and, at t != 1, the draw counts without their
// importance weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "distill/cache/teacher_sample.h"
#include "losses/topk_distillation.h"

namespace retort::distill {
namespace {

constexpr int64_t kVocab = 12, kRows = 20000;
constexpr int kDraws = 4;
constexpr double kSigmas = 5, kFloor = 1e-6;

struct Scenario {
  std::vector<double> teacher, student;  // logits of one row (the teacher's rounded to f32, as the sampler reads)
  std::vector<double> p, q;
};

std::vector<double> softmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : x) out.push_back(std::exp(v - m) / s);
  return out;
}

Scenario make_scenario() {
  std::mt19937 gen(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  Scenario s;
  for (int64_t j = 0; j < kVocab; ++j) {
    s.teacher.push_back(static_cast<float>(1.6 * normal(gen)));
    s.student.push_back(normal(gen));
  }
  s.p = softmax(s.teacher);
  s.q = softmax(s.student);
  return s;
}

// Per-row gradients [kRows, V] of the loss (Reduction::Sum: each row's own gradient wrt z) for targets [kRows, k].
std::vector<double> row_gradients(const Scenario& s, const std::vector<int32_t>& ids, const std::vector<double>& values,
                                  int64_t k, losses::TopkDivergence divergence) {
  std::vector<double> x;
  for (int64_t r = 0; r < kRows; ++r) x.insert(x.end(), s.student.begin(), s.student.end());
  Tensor student = Tensor::from_doubles(x, {kRows, kVocab}, DType::F64);
  student.set_requires_grad();
  losses::TopkTargets targets;
  targets.indices = Tensor::from_ints(ids, {kRows, k});
  targets.logprobs = Tensor::from_doubles(values, {kRows, k}, DType::F64);
  losses::TopkDistillationOptions o;
  o.divergence = divergence;
  o.reduction = losses::Reduction::Sum;
  Tensor loss = losses::topk_distillation_loss(student, targets, o);
  loss.backward();
  return student.grad().to_doubles();
}

struct Estimate {
  std::vector<double> mean, standard_error;
};

Estimate estimate(const std::vector<double>& rows) {
  Estimate e{std::vector<double>(kVocab, 0.0), std::vector<double>(kVocab, 0.0)};
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kVocab; ++j) e.mean[j] += rows[r * kVocab + j] / kRows;
  for (int64_t j = 0; j < kVocab; ++j) {
    double var = 0;
    for (int64_t r = 0; r < kRows; ++r) var += std::pow(rows[r * kVocab + j] - e.mean[j], 2);
    e.standard_error[j] = std::sqrt(var / (kRows - 1) / kRows);
  }
  return e;
}

// The largest |mean_j - (q_j - p_j)| in units of the bound kSigmas x se_j + kFloor (passes when < 1).
double worst_deviation(const Scenario& s, const std::vector<double>& mean, const std::vector<double>& se) {
  double worst = 0;
  for (int64_t j = 0; j < kVocab; ++j)
    worst = std::max(worst, std::abs(mean[j] - (s.q[j] - s.p[j])) / (kSigmas * se[j] + kFloor));
  return worst;
}

struct Draws {
  std::vector<int32_t> ids;
  std::vector<double> log_weights, counts_only;  // with and without the importance log-ratios
};

Draws draw(const Scenario& s, double t) {
  std::vector<double> x;
  std::vector<int64_t> positions;
  for (int64_t r = 0; r < kRows; ++r) {
    x.insert(x.end(), s.teacher.begin(), s.teacher.end());
    positions.push_back(r);
  }
  const VocabSample sample = sample_vocab(Tensor::from_doubles(x, {kRows, kVocab}, DType::F32), positions,
                                          {.draws = kDraws, .proposal_temperature = t, .seed = 2026});
  Draws d;
  d.ids = sample.indices;
  for (size_t i = 0; i < sample.indices.size(); ++i) {
    const double c = sample.counts[i];
    const double log_frequency = c > 0 ? std::log(c / kDraws) : -std::numeric_limits<double>::infinity();
    d.log_weights.push_back(log_frequency + sample.log_ratios[i]);
    d.counts_only.push_back(log_frequency);
  }
  return d;
}

// Proposals at t >= 1 (the teacher or flatter): the weights p / r = Z p^(1 - 1/t) are bounded, so the mean of the
// row gradients is normal to the precision the bound needs. (At t < 1 the estimate is unbiased too, but its weights
// grow without bound on rare ids: a heavy tail that the measured variance understates.)
TEST(SampledKdUnbiased, TheMeanGradientOverManyDrawsIsTheFullKdGradient) {
  const Scenario s = make_scenario();
  for (double t : {1.0, 1.8, 3.0}) {
    const Draws d = draw(s, t);
    const Estimate e =
        estimate(row_gradients(s, d.ids, d.log_weights, kDraws, losses::TopkDivergence::ForwardKLSampled));
    EXPECT_LT(worst_deviation(s, e.mean, e.standard_error), 1.0) << "proposal temperature " << t;
    if (t != 1.0) {
      // The counts alone estimate the proposal, not the teacher: the bound catches the bias.
      const Estimate biased =
          estimate(row_gradients(s, d.ids, d.counts_only, kDraws, losses::TopkDivergence::ForwardKLSampled));
      EXPECT_GT(worst_deviation(s, biased.mean, e.standard_error), 3.0) << "proposal temperature " << t;
    }
  }
}

TEST(SampledKdUnbiased, TheTopKCacheRenormalisedIsBiasedUnderTheSameBound) {
  const Scenario s = make_scenario();
  const Draws d = draw(s, 1.0);
  const Estimate sampled =
      estimate(row_gradients(s, d.ids, d.log_weights, kDraws, losses::TopkDivergence::ForwardKLSampled));
  // The teacher's top K ids with their log-probabilities, the same in every row (a deterministic estimate).
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s.p[a] > s.p[b]; });
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  for (int64_t r = 0; r < kRows; ++r)
    for (int i = 0; i < kDraws; ++i) ids.push_back(order[i]), logprobs.push_back(std::log(s.p[order[i]]));
  const Estimate topk =
      estimate(row_gradients(s, ids, logprobs, kDraws, losses::TopkDivergence::ForwardKLRenormalized));
  EXPECT_GT(worst_deviation(s, topk.mean, sampled.standard_error), 3.0);
}

}  // namespace
}  // namespace retort::distill
