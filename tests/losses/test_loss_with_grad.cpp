// cross_entropy_with_grad() and distribution_loss_with_grad(): loss and gradient in one call. On the CPU (and on a
// GPU for shapes the one-read kernels do not take) they are the two-pass forward + backward; on a Hopper GPU the
// one-read kernels (row resident in a cluster's shared memory) must give the same loss and gradient as the two
// passes, for every option and edge case, in place, accumulating, and with rows enough that every cluster walks
// several rows through both buffers. The CE case is also checked against float64 math written here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"
#ifdef RETORT_WITH_CUDA
#include "losses/kernels/row_resident_kernels.h"
#endif

namespace retort::losses {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> random_logits(int64_t rows, int64_t vocab, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(static_cast<size_t>(rows * vocab));
  for (double& x : v) x = normal(rng);
  return v;
}

std::vector<int32_t> random_labels(int64_t rows, int64_t vocab, int every_nth_ignored, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[r] = every_nth_ignored > 0 && r % every_nth_ignored == 0 ? -100 : pick(rng);
  return labels;
}

// |a - b| <= atol + rtol |b| elementwise, reporting the first offender.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << what << " at " << i << ": " << got[i] << " vs " << want[i];
      continue;
    }
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at " << i;
  }
}

void expect_loss_close(double got, double want, double rtol, const std::string& what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, rtol * std::abs(want) + 1e-6) << what;
  }
}

// ---- the CPU: the two passes ------------------------------------------------------------------------------------

TEST(LossWithGrad, CrossEntropyOnTheCpuEqualsForwardThenBackwardAlsoInPlace) {
  const int64_t rows = 9, vocab = 50;
  const auto x = random_logits(rows, vocab, 3.0, 1);
  const Tensor labels = Tensor::from_ints(random_labels(rows, vocab, 4, 2), {rows});
  CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  o.z_loss = 1e-3;
  const Tensor logits = Tensor::from_doubles(x, {rows, vocab});
  const CrossEntropyForward forward = cross_entropy_forward(logits, labels, o);
  Tensor want = Tensor::empty({rows, vocab}, DType::F64);
  cross_entropy_backward(logits, forward.saved, Tensor(), want);

  Tensor separate = Tensor::empty({rows, vocab}, DType::F64);
  EXPECT_EQ(cross_entropy_with_grad(logits, labels, separate, o).item(), forward.loss.item());
  EXPECT_EQ(separate.to_doubles(), want.to_doubles());
  Tensor in_place = logits.clone();
  EXPECT_EQ(cross_entropy_with_grad(in_place, labels, in_place, o).item(), forward.loss.item());
  EXPECT_EQ(in_place.to_doubles(), want.to_doubles());
}

TEST(LossWithGrad, DistributionLossOnTheCpuEqualsForwardThenBackward) {
  const int64_t rows = 7, vocab = 33;
  const Tensor student = Tensor::from_doubles(random_logits(rows, vocab, 2.0, 3), {rows, vocab});
  const Tensor teacher = Tensor::from_doubles(random_logits(rows, vocab, 2.0, 4), {rows, vocab});
  const Tensor labels = Tensor::from_ints(random_labels(rows, vocab, 3, 5), {rows});
  for (Divergence d : {Divergence::ForwardKL, Divergence::ReverseKL, Divergence::SoftCrossEntropy}) {
    DistributionLossOptions o;
    o.divergence = d;
    o.temperature = 2.0;
    const DistributionLossForward forward = distribution_loss_forward(student, teacher, labels, o);
    Tensor want = Tensor::full({rows, vocab}, 0.5, DType::F64);
    distribution_loss_backward(student, teacher, forward.saved, Tensor(), want, /*accumulate=*/true);
    Tensor got = Tensor::full({rows, vocab}, 0.5, DType::F64);
    EXPECT_EQ(distribution_loss_with_grad(student, teacher, labels, got, o, /*accumulate=*/true).item(),
              forward.loss.item());
    EXPECT_EQ(got.to_doubles(), want.to_doubles());
  }
}

TEST(LossWithGrad, AGradientBufferOfAnotherShapeIsAnError) {
  const Tensor logits = Tensor::zeros({4, 8});
  Tensor grad = Tensor::zeros({4, 7});
  EXPECT_THROW(cross_entropy_with_grad(logits, Tensor::from_ints({1, 2, 3, 4}, {4}), grad), InputError);
}

#ifdef RETORT_WITH_CUDA
// ---- one GPU: the one-read kernels against the two passes -------------------------------------------------------

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

bool one_read_available() {
  return cuda_available() && kernels::row_resident::supported(Tensor::zeros({1, 64}, DType::BF16, kGpu), Tensor(),
                                                              Tensor::zeros({1, 64}, DType::BF16, kGpu));
}

#define SKIP_WITHOUT_HOPPER() \
  SKIP_WITHOUT_GPU();         \
  if (!one_read_available()) GTEST_SKIP() << "the one-read kernels need sm_90 or newer"

// The gradient's tolerance: bf16 keeps 8 bits, and the two paths may round a float that differs in the last bits
// to neighbouring bf16 values.
double grad_rtol(DType grad_dtype) {
  return grad_dtype == DType::BF16 ? 1.0 / 64 : 2e-5;
}

struct CeCase {
  std::string name;
  int64_t rows = 300, vocab = 4096;
  double scale = 3.0;
  int ignored_every = 5;  // 0: none; 1: every row
  double smoothing = 0.0;
  LabelSmoothingConvention convention = LabelSmoothingConvention::Megatron;
  double z_loss = 0.0;
  Reduction reduction = Reduction::Mean;
  std::optional<double> normalizer;
  bool minus_inf = false;        // scattered -inf logits (never on the label)
  bool minus_inf_block = false;  // the first half of every row -inf (whole cluster blocks of it)
};

std::vector<CeCase> ce_cases() {
  std::vector<CeCase> cases;
  cases.push_back({.name = "vocab_32768", .rows = 200, .vocab = 32768});
  cases.push_back({.name = "vocab_131072", .rows = 160, .vocab = 131072});
  cases.push_back({.name = "vocab_200000", .rows = 40, .vocab = 200000});
  cases.push_back({.name = "many_rows_small_vocab", .rows = 5000, .vocab = 512});
  cases.push_back({.name = "megatron_smoothing", .vocab = 8192, .smoothing = 0.1});
  cases.push_back({.name = "pytorch_smoothing_sum",
                   .vocab = 8192,
                   .smoothing = 0.2,
                   .convention = LabelSmoothingConvention::PyTorch,
                   .reduction = Reduction::Sum});
  cases.push_back({.name = "z_loss_normalizer", .vocab = 8192, .z_loss = 1e-3, .normalizer = 1234.0});
  cases.push_back({.name = "logits_x1000", .vocab = 8192, .scale = 3000.0, .smoothing = 0.1});
  cases.push_back({.name = "minus_inf", .vocab = 8192, .minus_inf = true});
  cases.push_back({.name = "minus_inf_half_rows", .rows = 64, .vocab = 131072, .minus_inf_block = true});
  cases.push_back({.name = "all_ignored", .vocab = 8192, .ignored_every = 1});
  return cases;
}

struct CeInputs {
  std::vector<double> logits;
  std::vector<int32_t> labels;
};

CeInputs ce_inputs(const CeCase& c) {
  CeInputs in{random_logits(c.rows, c.vocab, c.scale, 11), random_labels(c.rows, c.vocab, c.ignored_every, 12)};
  for (int64_t r = 0; r < c.rows; ++r) {
    const int32_t y = in.labels[r];
    for (int64_t j = 0; j < c.vocab; ++j) {
      double& v = in.logits[r * c.vocab + j];
      if (c.minus_inf && j % 7 == 3 && j != y) v = -kInf;
      if (c.minus_inf_block && j < c.vocab / 2) v = -kInf;
    }
    if (c.minus_inf_block && y >= 0) in.labels[r] = static_cast<int32_t>(c.vocab / 2 + y / 2);
  }
  return in;
}

CrossEntropyOptions ce_options(const CeCase& c) {
  CrossEntropyOptions o;
  o.label_smoothing = c.smoothing;
  o.smoothing_convention = c.convention;
  o.z_loss = c.z_loss;
  o.reduction = c.reduction;
  o.normalizer = c.normalizer;
  return o;
}

class CrossEntropyOneRead : public ::testing::TestWithParam<CeCase> {};

TEST_P(CrossEntropyOneRead, EqualsTheTwoPassesInPlaceIntoABufferAndAccumulating) {
  SKIP_WITHOUT_HOPPER();
  const CeCase& c = GetParam();
  const CeInputs in = ce_inputs(c);
  const CrossEntropyOptions o = ce_options(c);
  for (DType dtype : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor logits = Tensor::from_doubles(in.logits, {c.rows, c.vocab}, dtype, kGpu);
    const Tensor labels = Tensor::from_ints(in.labels, {c.rows}, kGpu);
    Tensor buffer = Tensor::empty({c.rows, c.vocab}, dtype, kGpu);
    ASSERT_TRUE(kernels::row_resident::supported(logits, Tensor(), buffer)) << "the test must take the one-read path";

    const CrossEntropyForward forward = cross_entropy_forward(logits, labels, o);
    Tensor want = Tensor::empty({c.rows, c.vocab}, dtype, kGpu);
    cross_entropy_backward(logits, forward.saved, Tensor(), want);
    const double want_loss = forward.loss.item();
    const auto want_grad = want.to_doubles();

    const double loss = cross_entropy_with_grad(logits, labels, buffer, o).item();
    expect_loss_close(loss, want_loss, 1e-5, "into a buffer");
    // With logits x1000 the two-pass backward takes exp(x - lse) with lse rounded at the logits' magnitude (an
    // absolute error near 2^-13 at 3000, the same relative error in q); the one-read kernel takes
    // exp((x - m) - log S), exact near the top. The float64 test below checks which one is right.
    const double rtol = c.scale > 100 ? 1e-3 : grad_rtol(dtype);
    expect_close(buffer.to_doubles(), want_grad, rtol, 1e-9, "gradient into a buffer");

    Tensor in_place = logits.clone();
    const double loss_in_place = cross_entropy_with_grad(in_place, labels, in_place, o).item();
    EXPECT_EQ(loss_in_place, loss) << "in place: the same kernel on the same data";
    EXPECT_EQ(in_place.to_doubles(), buffer.to_doubles()) << "in place";

    // Accumulating into an f32 buffer that holds 0.25 everywhere.
    Tensor acc = Tensor::full({c.rows, c.vocab}, 0.25, DType::F32, kGpu);
    cross_entropy_with_grad(logits, labels, acc, o, /*accumulate=*/true);
    Tensor want_acc = Tensor::full({c.rows, c.vocab}, 0.25, DType::F32, kGpu);
    cross_entropy_backward(logits, forward.saved, Tensor(), want_acc, /*accumulate=*/true);
    expect_close(acc.to_doubles(), want_acc.to_doubles(), 2e-5, 1e-7, "accumulated");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyOneRead, ::testing::ValuesIn(ce_cases()),
                         [](const auto& info) { return info.param.name; });

// Independent of both kernels: float64 softmax and the mean over valid rows, written here; also for logits x1000.
TEST(CrossEntropyOneReadReference, MatchesFloat64Math) {
  SKIP_WITHOUT_HOPPER();
  const int64_t rows = 97, vocab = 65536;
  for (double scale : {4.0, 3000.0}) {
    SCOPED_TRACE("logit scale " + std::to_string(scale));
    const auto x = random_logits(rows, vocab, scale, 21);
    const auto y = random_labels(rows, vocab, 6, 22);
    // The logits as the GPU will hold them (f32), so the reference sees the same numbers.
    std::vector<double> xf(x.size());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(x[i]);
    double total = 0;
    int valid = 0;
    std::vector<double> grad(x.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      if (y[r] == -100) continue;
      ++valid;
      const double* row = &xf[r * vocab];
      double m = -kInf, s = 0;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, row[j]);
      for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - m);
      total += m + std::log(s) - row[y[r]];
      for (int64_t j = 0; j < vocab; ++j) grad[r * vocab + j] = std::exp(row[j] - m) / s - (j == y[r] ? 1.0 : 0.0);
    }
    for (double& g : grad) g /= valid;
    Tensor logits = Tensor::from_doubles(xf, {rows, vocab}, DType::F32, kGpu);
    const double loss = cross_entropy_with_grad(logits, Tensor::from_ints(y, {rows}), logits).item();
    EXPECT_NEAR(loss, total / valid, 1e-5 * total / valid);
    expect_close(logits.to_doubles(), grad, 2e-5, 1e-10, "gradient vs float64");
  }
}

TEST(CrossEntropyOneReadReference, ATargetOutsideTheVocabularyOnTheGpuIsNamed) {
  SKIP_WITHOUT_HOPPER();
  Tensor logits = Tensor::zeros({4, 1024}, DType::BF16, kGpu);
  const Tensor labels = Tensor::from_ints({1, 2, 5000, 3}, {4}, kGpu);
  const std::string message = [&] {
    try {
      cross_entropy_with_grad(logits, labels, logits);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(message.find("5000"), std::string::npos) << message;
}

struct KdCase {
  std::string name;
  int64_t rows = 300, vocab = 4096;
  double temperature = 1.0;
  bool t_squared = true;
  bool labels = true;
  bool teacher_minus_inf = false;
  Reduction reduction = Reduction::Mean;
  std::vector<DType> dtypes{DType::BF16, DType::F32};
};

// Student plus teacher bytes per row must fit 8 blocks' shared memory: 131072 columns only in bf16.
std::vector<KdCase> kd_cases() {
  return {{.name = "vocab_32768", .rows = 200, .vocab = 32768},
          {.name = "vocab_131072", .rows = 100, .vocab = 131072, .dtypes = {DType::BF16}},
          {.name = "temperature_no_labels_sum",
           .vocab = 8192,
           .temperature = 2.5,
           .labels = false,
           .reduction = Reduction::Sum},
          {.name = "no_t_squared", .vocab = 8192, .temperature = 3.0, .t_squared = false},
          {.name = "teacher_minus_inf", .vocab = 8192, .teacher_minus_inf = true},
          {.name = "many_rows", .rows = 5000, .vocab = 256}};
}

class DistributionLossOneRead : public ::testing::TestWithParam<KdCase> {};

TEST_P(DistributionLossOneRead, EqualsTheTwoPassesForEveryDivergence) {
  SKIP_WITHOUT_HOPPER();
  const KdCase& c = GetParam();
  auto t = random_logits(c.rows, c.vocab, 2.0, 31);
  if (c.teacher_minus_inf)
    for (size_t i = 0; i < t.size(); i += 5) t[i] = -kInf;
  const auto x = random_logits(c.rows, c.vocab, 2.0, 32);
  const Tensor labels = c.labels ? Tensor::from_ints(random_labels(c.rows, c.vocab, 4, 33), {c.rows}, kGpu) : Tensor();
  for (Divergence d : {Divergence::ForwardKL, Divergence::ReverseKL, Divergence::SoftCrossEntropy}) {
    for (DType dtype : c.dtypes) {
      SCOPED_TRACE(std::to_string(static_cast<int>(d)) + " " + std::string(dtype_name(dtype)));
      const Tensor student = Tensor::from_doubles(x, {c.rows, c.vocab}, dtype, kGpu);
      const Tensor teacher = Tensor::from_doubles(t, {c.rows, c.vocab}, dtype, kGpu);
      DistributionLossOptions o;
      o.divergence = d;
      o.temperature = c.temperature;
      o.scale_by_t_squared = c.t_squared;
      o.reduction = c.reduction;
      Tensor buffer = Tensor::empty({c.rows, c.vocab}, dtype, kGpu);
      ASSERT_TRUE(kernels::row_resident::supported(student, teacher, buffer)) << "must take the one-read path";

      const DistributionLossForward forward = distribution_loss_forward(student, teacher, labels, o);
      Tensor want = Tensor::empty({c.rows, c.vocab}, dtype, kGpu);
      distribution_loss_backward(student, teacher, forward.saved, Tensor(), want);
      const double want_loss = forward.loss.item();
      const double loss = distribution_loss_with_grad(student, teacher, labels, buffer, o).item();
      expect_loss_close(loss, want_loss, 2e-5, "loss");
      // Reverse KL's gradient is a difference of two nearby terms: an absolute floor at the gradient's scale.
      expect_close(buffer.to_doubles(), want.to_doubles(), grad_rtol(dtype), 1e-8, "gradient");

      Tensor in_place = student.clone();
      EXPECT_EQ(distribution_loss_with_grad(in_place, teacher, labels, in_place, o).item(), loss);
      expect_close(in_place.to_doubles(), buffer.to_doubles(), 0.0, 0.0, "in place: the same kernel on the same data");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributionLossOneRead, ::testing::ValuesIn(kd_cases()),
                         [](const auto& info) { return info.param.name; });
#endif

}  // namespace
}  // namespace retort::losses
