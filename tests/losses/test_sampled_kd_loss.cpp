// The sampled forward KL (TopkDivergence::ForwardKLSampled, sampled-logit KD) against a float64 dense reference
// written here from the full-vocabulary softmax: loss sum_S a_j log(a_j / q_j) and gradient (sum_S a) q_j - a_j over
// the whole vocabulary, with masking, the CE mix and the temperature's T^2. Vocab-parallel at tp 1, 2 and 4 (Gloo
// thread ranks): every rank's LOCAL gradient is compared with its slice of the dense gradient. The CUDA kernels are
// checked against the same reference (skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/tensor/device.h"
#include "losses/topk_distillation.h"
#include "parallel/comm/thread_ranks.h"
#include "tests/test_support.h"

namespace retort::losses {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kRows = 14, kVocab = 36, kSlots = 7;  // the vocabulary divides by 1, 2 and 4
constexpr int kIgnore = -100;

// Student logits and the sampled targets of every row: K = kSlots draws from a random proposal, their distinct ids
// with weight (c / K) x a random importance ratio, the filler slots -inf (no draw).
struct Problem {
  std::vector<double> student;  // [rows, V]
  std::vector<int32_t> ids;     // [rows, K]
  std::vector<double> log_weights;
  std::vector<int32_t> labels, mask;
};

Problem make_problem(uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Problem p;
  for (int64_t i = 0; i < kRows * kVocab; ++i) p.student.push_back(2.0 * normal(gen));
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<double> proposal(kVocab);
    for (auto& v : proposal) v = std::exp(1.5 * normal(gen));
    std::discrete_distribution<int32_t> draw(proposal.begin(), proposal.end());
    std::vector<int32_t> counts(kVocab, 0);
    for (int64_t d = 0; d < kSlots; ++d) ++counts[draw(gen)];
    std::vector<int32_t> row_ids;
    std::vector<double> row_weights;
    for (int32_t j = 0; j < kVocab; ++j)
      if (counts[j] > 0) {
        row_ids.push_back(j);
        row_weights.push_back(std::log(counts[j] / static_cast<double>(kSlots)) + 0.4 * normal(gen));
      }
    for (int32_t j = 0; static_cast<int64_t>(row_ids.size()) < kSlots; ++j)
      if (counts[j] == 0) row_ids.push_back(j), row_weights.push_back(-kInf);
    std::vector<size_t> order(kSlots);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), gen);  // the op takes the slots in any order
    for (size_t i : order) p.ids.push_back(row_ids[i]), p.log_weights.push_back(row_weights[i]);
    p.labels.push_back(r % 5 == 3 ? kIgnore : static_cast<int32_t>(gen() % kVocab));
    p.mask.push_back(r % 6 == 4 ? 0 : 1);
  }
  return p;
}

struct Dense {
  double loss = 0;
  std::vector<double> grad;  // [rows, V]
};

double log_sum_exp(const double* v, int64_t n) {
  const double m = *std::max_element(v, v + n);
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(v[j] - m);
  return m + std::log(s);
}

// kd_ratio T^2 KD + (1 - kd_ratio) CE per valid row, averaged over the valid rows.
Dense dense_reference(const Problem& p, double T, double kd_ratio) {
  Dense d;
  d.grad.assign(p.student.size(), 0.0);
  int valid = 0;
  for (int64_t r = 0; r < kRows; ++r) valid += p.labels[r] != kIgnore && p.mask[r] != 0;
  for (int64_t r = 0; r < kRows; ++r) {
    if (p.labels[r] == kIgnore || p.mask[r] == 0) continue;
    const double* x = p.student.data() + r * kVocab;
    std::vector<double> z(kVocab);
    for (int64_t j = 0; j < kVocab; ++j) z[j] = x[j] / T;
    const double lse_z = log_sum_exp(z.data(), kVocab), lse_x = log_sum_exp(x, kVocab);
    std::vector<double> a(kVocab, 0.0);
    for (int64_t s = 0; s < kSlots; ++s) a[p.ids[r * kSlots + s]] = std::exp(p.log_weights[r * kSlots + s]);
    const double total = std::accumulate(a.begin(), a.end(), 0.0);
    double kl = 0;
    for (int64_t j = 0; j < kVocab; ++j)
      if (a[j] > 0) kl += a[j] * (std::log(a[j]) - (z[j] - lse_z));
    const double ce = lse_x - x[p.labels[r]];
    d.loss += (kd_ratio * T * T * kl + (1 - kd_ratio) * ce) / valid;
    for (int64_t j = 0; j < kVocab; ++j) {
      const double dz = total * std::exp(z[j] - lse_z) - a[j];
      const double dce = std::exp(x[j] - lse_x) - (j == p.labels[r] ? 1.0 : 0.0);
      d.grad[r * kVocab + j] = (kd_ratio * T * dz + (1 - kd_ratio) * dce) / valid;
    }
  }
  return d;
}

TopkTargets targets_of(const Problem& p, DType dtype) {
  TopkTargets t;
  t.indices = Tensor::from_ints(p.ids, {kRows, kSlots});
  t.logprobs = Tensor::from_doubles(p.log_weights, {kRows, kSlots}, dtype);
  t.labels = Tensor::from_ints(p.labels, {kRows});
  t.mask = Tensor::from_ints(p.mask, {kRows});
  return t;
}

TopkDistillationOptions options_of(double T, double kd_ratio) {
  TopkDistillationOptions o;
  o.divergence = TopkDivergence::ForwardKLSampled;
  o.temperature = T;
  o.targets_at_temperature = T != 1.0;  // the weights are of the teacher at T
  o.kd_ratio = kd_ratio;
  o.ignore_index = kIgnore;
  return o;
}

struct Setting {
  double T, kd_ratio;
};
const Setting kSettings[] = {{1.0, 1.0}, {1.0, 0.6}, {2.0, 1.0}, {2.0, 0.6}};

TEST(SampledKdLoss, EveryRanksLocalGradientIsItsSliceOfTheDenseFloat64Gradient) {
  const Problem p = make_problem(11);
  for (const Setting& s : kSettings) {
    const Dense want = dense_reference(p, s.T, s.kd_ratio);
    for (int tp : {1, 2, 4}) {
      const int64_t local = kVocab / tp;
      auto body = [&](std::shared_ptr<Communicator> group) {
        const int rank = group ? group->rank() : 0;
        std::vector<double> slice;
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t j = rank * local; j < (rank + 1) * local; ++j) slice.push_back(p.student[r * kVocab + j]);
        Tensor student = Tensor::from_doubles(slice, {kRows, local}, DType::F64);
        if (group) student.set_sharding({1, 1, group});
        student.set_requires_grad();
        Tensor loss = topk_distillation_loss(student, targets_of(p, DType::F64), options_of(s.T, s.kd_ratio));
        loss.backward();
        EXPECT_NEAR(loss.item(), want.loss, 1e-12 * std::max(1.0, std::abs(want.loss)))
            << "tp " << tp << " T " << s.T << " kd_ratio " << s.kd_ratio;
        const std::vector<double> grad = student.grad().to_doubles();
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t j = 0; j < local; ++j)
            ASSERT_NEAR(grad[r * local + j], want.grad[r * kVocab + rank * local + j], 1e-13)
                << "tp " << tp << " rank " << rank << " row " << r << " column " << j << " T " << s.T;
      };
      if (tp == 1) {
        body(nullptr);
      } else {
        run_ranks(tp, body);
      }
    }
  }
}

// At t = 1 the weights are c / K and add up to 1: the loss is KL(c / K || q), and a student equal to the empirical
// distribution (every other id at -inf) has loss 0 and gradient 0.
TEST(SampledKdLoss, AStudentEqualToTheDrawsHasZeroLossAndGradient) {
  const std::vector<int32_t> ids{4, 1, 7, 0};
  const std::vector<double> counts{3, 4, 1, 0};  // K = 8; id 0 is a filler
  std::vector<double> x(9, -kInf), log_weights;
  for (size_t i = 0; i < ids.size(); ++i) {
    log_weights.push_back(counts[i] > 0 ? std::log(counts[i] / 8.0) : -kInf);
    if (counts[i] > 0) x[ids[i]] = std::log(counts[i] / 8.0) + 3.0;
  }
  Tensor student = Tensor::from_doubles(x, {1, 9}, DType::F64);
  student.set_requires_grad();
  TopkTargets t;
  t.indices = Tensor::from_ints(ids, {1, 4});
  t.logprobs = Tensor::from_doubles(log_weights, {1, 4}, DType::F64);
  Tensor loss = topk_distillation_loss(student, t, options_of(1.0, 1.0));
  loss.backward();
  EXPECT_NEAR(loss.item(), 0.0, 1e-15);
  for (double g : student.grad().to_doubles()) EXPECT_NEAR(g, 0.0, 1e-15);
}

TEST(SampledKdLoss, ATemperatureWithoutTargetsAtItIsAnError) {
  const Problem p = make_problem(3);
  Tensor student = Tensor::from_doubles(p.student, {kRows, kVocab}, DType::F64);
  TopkDistillationOptions o = options_of(2.0, 1.0);
  o.targets_at_temperature = false;
  const std::string message =
      testing::message_of([&] { topk_distillation_loss(student, targets_of(p, DType::F64), o); });
  EXPECT_NE(message.find("with the sampled targets needs the teacher at that temperature"), std::string::npos)
      << message;
}

TEST(SampledKdLoss, CudaKernelsMatchTheDenseFloat64Reference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Problem p = make_problem(29);
  for (const Setting& s : kSettings) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      const Dense want = dense_reference(p, s.T, s.kd_ratio);
      Tensor student = Tensor::from_doubles(p.student, {kRows, kVocab}, dtype).to(Device::cuda(0));
      student.set_requires_grad();
      Tensor loss = topk_distillation_loss(student, targets_of(p, DType::F32), options_of(s.T, s.kd_ratio));
      loss.backward();
      // bf16 logits are rounded before the op: compare with the reference of the rounded logits.
      Problem rounded = p;
      rounded.student = Tensor::from_doubles(p.student, {kRows, kVocab}, dtype).to_doubles();
      const Dense ref = dtype == DType::F32 ? want : dense_reference(rounded, s.T, s.kd_ratio);
      EXPECT_NEAR(loss.item(), ref.loss, 2e-5 * std::max(1.0, std::abs(ref.loss)))
          << dtype_name(dtype) << " T " << s.T << " kd_ratio " << s.kd_ratio;
      const std::vector<double> grad = student.grad().to(Device::cpu()).to_doubles();
      const double tolerance = dtype == DType::F32 ? 2e-6 : 2e-3;  // bf16: the gradient is stored in bf16
      for (size_t i = 0; i < grad.size(); ++i)
        ASSERT_NEAR(grad[i], ref.grad[i], tolerance) << dtype_name(dtype) << " element " << i << " T " << s.T;
    }
  }
}

}  // namespace
}  // namespace retort::losses
