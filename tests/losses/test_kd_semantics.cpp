// What only the distribution (KD) losses have: the teacher is a constant, identical distributions give zero, and
// their bad inputs are named (the checks every loss family shares are in test_loss_*.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "distribution_loss_family.h"
#include "tests/test_support.h"

namespace retort::loss_testing {
namespace {

using kd::all_divergences;
using kd::Divergence;
using kd::options_for;
using losses::DistributionLossOptions;
using retort::testing::message_of;

// The teacher is a constant: a teacher that requires a gradient gets none.
TEST(DistributionLossFusedApi, TheTeacherGetsNoGradient) {
  Tensor student = Tensor::full({2, 5}, 0.5, DType::F32).set_requires_grad();
  Tensor teacher = Tensor::from_doubles({1, 2, 3, 4, 5, 5, 4, 3, 2, 1}, {2, 5}, DType::F32).set_requires_grad();
  losses::distribution_loss(student, teacher, Tensor()).backward();
  EXPECT_TRUE(student.grad().defined());
  EXPECT_FALSE(teacher.grad().defined());
}

// Identical distributions: every divergence but the soft CE (which is then the entropy) is 0, as is the gradient.
TEST(DistributionLossFusedApi, IdenticalDistributionsGiveZero) {
  const std::vector<double> x = {0.5, -1.0, 2.0, -kInf, 0.0, 3.0};
  for (Divergence d : {Divergence::ForwardKL, Divergence::ReverseKL}) {
    Tensor student = Tensor::from_doubles(x, {1, 6}, DType::F64).set_requires_grad();
    Tensor teacher = Tensor::from_doubles(x, {1, 6}, DType::F64);
    Tensor loss = losses::distribution_loss(student, teacher, Tensor(), options_for(d, 1.7));
    EXPECT_NEAR(loss.item(), 0.0, 1e-15);
    loss.backward();
    for (double g : student.grad().to_doubles()) EXPECT_NEAR(g, 0.0, 1e-15);
  }
}

// ---- bad inputs ---------------------------------------------------------------------------------------------

std::string error_of(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                     const DistributionLossOptions& o = {}) {
  return message_of([&] { losses::distribution_loss(student, teacher, labels, o); });
}

TEST(DistributionLossErrors, BadInputsAreNamed) {
  const Tensor s = Tensor::zeros({4, 10}, DType::F32);
  EXPECT_NE(error_of(s, Tensor::zeros({4, 9}), Tensor()).find("must match the student logits"), std::string::npos);
  EXPECT_NE(error_of(s, Tensor(), Tensor()).find("teacher logits (undefined)"), std::string::npos);
  EXPECT_NE(error_of(s, Tensor::zeros({4, 10}, DType::I32), Tensor()).find("a floating dtype"), std::string::npos);
  EXPECT_NE(error_of(Tensor::zeros({4, 10}, DType::I32), s, Tensor()).find("need a floating dtype"), std::string::npos);
  EXPECT_NE(error_of(s, s, Tensor::from_ints({1, 2, 3}, {3})).find("labels i32[3] on cpu do not match logits"),
            std::string::npos);
  EXPECT_NE(error_of(s, s, Tensor::zeros({4}, DType::F32)).find("one i32 id per row"), std::string::npos);
  // Labels [4] for [2, 2, 10] logits are fine (flattened rows).
  EXPECT_NO_THROW(losses::distribution_loss(Tensor::zeros({2, 2, 10}), Tensor::zeros({2, 2, 10}),
                                            Tensor::from_ints({1, 2, 3, 4}, {4})));
  DistributionLossOptions o;
  for (double t : {0.0, -1.0, std::nan("")}) {
    o.temperature = t;
    EXPECT_NE(error_of(s, s, Tensor(), o).find("temperature must be a positive number"), std::string::npos) << t;
  }
  o = {};
  o.normalizer = 0.0;
  EXPECT_NE(error_of(s, s, Tensor(), o).find("normalizer must be positive"), std::string::npos);
}

}  // namespace
}  // namespace retort::loss_testing
