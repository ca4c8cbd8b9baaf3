// The tape-free entry points a fused trainer uses: the forward records nothing, the backward writes or adds
// into a caller's buffer (an f32 accumulator for bf16 logits included), scaled by a grad_output tensor, and
// leaves ignored rows alone when accumulating. Also: an all-ignored batch gives exact zeros.
#include <gtest/gtest.h>

#include "ce_test_support.h"

namespace retort::ce_testing {
namespace {

Case fused_case() {
  Case c;
  c.name = "fused";
  c.vocab_local = 53;
  c.options.label_smoothing = 0.1;
  c.options.z_loss = 1e-3;
  return c;
}

TEST(CrossEntropyFusedApi, BackwardIntoABufferEqualsTheAutogradGradient) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  const Tensor targets = Tensor::from_ints(p.targets, {p.rows});
  Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F32);
  const auto forward = losses::cross_entropy_forward(logits, targets, c.options);
  EXPECT_FALSE(forward.loss.requires_grad());
  Tensor buffer = Tensor::empty(logits.shape(), DType::F32);
  losses::cross_entropy_backward(logits, forward.saved, Tensor(), buffer);

  logits.set_requires_grad();
  Tensor loss = losses::cross_entropy(logits, targets, c.options);
  EXPECT_EQ(loss.item(), forward.loss.item());
  loss.backward();
  EXPECT_EQ(buffer.to_doubles(), logits.grad().to_doubles());
}

// bf16 logits into an f32 buffer: the gradient is not rounded to bf16, so it matches the reference to f32.
TEST(CrossEntropyFusedApi, AnF32BufferForBf16Logits) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  const Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::BF16);
  const auto forward = losses::cross_entropy_forward(logits, Tensor::from_ints(p.targets, {p.rows}), c.options);
  Tensor buffer = Tensor::empty(logits.shape(), DType::F32);
  losses::cross_entropy_backward(logits, forward.saved, Tensor(), buffer);
  const Reference ref = dense_reference(p, stored(p.logits, DType::BF16), c.options);
  const double err = scaled_error(buffer.to_doubles(), ref.grad);
  EXPECT_LE(err, 2e-6);
  ErrorLog::get().note("cpu bf16 logits, f32 grad", 0, err);
}

TEST(CrossEntropyFusedApi, AccumulateAddsScaledGradientsAndSkipsIgnoredRows) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  const Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
  const auto forward = losses::cross_entropy_forward(logits, Tensor::from_ints(p.targets, {p.rows}), c.options);
  Tensor buffer = Tensor::full(logits.shape(), 0.5, DType::F64);
  const Tensor two = Tensor::scalar(2.0, DType::F64);
  losses::cross_entropy_backward(logits, forward.saved, two, buffer, true);
  losses::cross_entropy_backward(logits, forward.saved, two, buffer, true);
  const Reference ref = dense_reference(p, p.logits, c.options);
  const auto got = buffer.to_doubles();
  for (int64_t i = 0; i < p.rows; ++i) {
    for (int64_t j = 0; j < p.vocab; ++j) {
      const size_t k = static_cast<size_t>(i * p.vocab + j);
      if (p.targets[i] == c.options.ignore_index) {
        ASSERT_EQ(got[k], 0.5) << "ignored row " << i << " was written";
      } else {
        ASSERT_NEAR(got[k], 0.5 + 4 * ref.grad[k], 1e-12) << i << ", " << j;
      }
    }
  }
}

TEST(CrossEntropyFusedApi, TwoBackwardPassesAccumulateOnTheLeaf) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  const Tensor targets = Tensor::from_ints(p.targets, {p.rows});
  Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64).set_requires_grad();
  losses::cross_entropy(logits, targets, c.options).backward();
  losses::cross_entropy(logits, targets, c.options).backward();
  const Reference ref = dense_reference(p, p.logits, c.options);
  std::vector<double> twice = ref.grad;
  for (double& g : twice) g *= 2;
  EXPECT_LE(scaled_error(logits.grad().to_doubles(), twice), 1e-12);
}

TEST(CrossEntropyFusedApi, AllIgnoredGivesExactZeros) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    Tensor logits = Tensor::full({3, 7}, 1.5, dtype).set_requires_grad();
    CrossEntropyOptions o;
    o.label_smoothing = 0.1;
    o.z_loss = 1e-2;
    Tensor loss = losses::cross_entropy(logits, Tensor::from_ints({-100, -100, -100}, {3}), o);
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    for (double g : logits.grad().to_doubles()) ASSERT_EQ(g, 0.0);
  }
}

}  // namespace
}  // namespace retort::ce_testing
