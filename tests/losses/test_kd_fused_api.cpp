// The tape-free entry points a fused trainer uses (the forward records nothing, the backward writes or adds into
// a caller's buffer, an f32 accumulator for bf16 logits included, scaled by a grad_output tensor, and leaves
// masked rows alone when accumulating), where the group comes from, what crosses it, and bad inputs.
#include <gtest/gtest.h>

#include "kd_test_support.h"
#include "tests/test_support.h"

namespace retort::kd_testing {
namespace {

using retort::testing::message_of;

Case fused_case() {
  Case c;
  c.name = "fused";
  c.vocab_local = 53;
  c.inf_entries = true;
  return c;
}

DistributionLossOptions options_for(Divergence d, double t = 2.0) {
  DistributionLossOptions o;
  o.divergence = d;
  o.temperature = t;
  return o;
}

TEST(DistributionLossFusedApi, BackwardIntoABufferEqualsTheAutogradGradient) {
  const Case c = fused_case();
  for (Divergence d : all_divergences()) {
    const Problem p = make_problem(c, 1, d);
    const Tensor labels = Tensor::from_ints(p.labels, {p.rows});
    const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F32);
    Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F32);
    const auto forward = losses::distribution_loss_forward(student, teacher, labels, options_for(d));
    EXPECT_FALSE(forward.loss.requires_grad());
    Tensor buffer = Tensor::empty(student.shape(), DType::F32);
    losses::distribution_loss_backward(student, teacher, forward.saved, Tensor(), buffer);

    student.set_requires_grad();
    Tensor loss = losses::distribution_loss(student, teacher, labels, options_for(d));
    EXPECT_EQ(loss.item(), forward.loss.item());
    loss.backward();
    EXPECT_EQ(buffer.to_doubles(), student.grad().to_doubles());
  }
}

// bf16 logits into an f32 buffer: the gradient is not rounded to bf16, so it matches the reference to f32.
TEST(DistributionLossFusedApi, AnF32BufferForBf16Logits) {
  const Case c = fused_case();
  for (Divergence d : all_divergences()) {
    const Problem p = make_problem(c, 1, d);
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::BF16);
    const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::BF16);
    const auto forward =
        losses::distribution_loss_forward(student, teacher, Tensor::from_ints(p.labels, {p.rows}), options_for(d));
    Tensor buffer = Tensor::empty(student.shape(), DType::F32);
    losses::distribution_loss_backward(student, teacher, forward.saved, Tensor(), buffer);
    const Reference ref = reference_for(c, p, options_for(d), DType::BF16, DType::BF16);
    const double err = grad_error(buffer.to_doubles(), ref.grad, ref.grad_unit);
    EXPECT_LE(err, 2e-6) << divergence_name(d);
    ErrorLog::get().note("cpu bf16 logits, f32 grad " + divergence_name(d), 0, err);
  }
}

TEST(DistributionLossFusedApi, AccumulateAddsScaledGradientsAndSkipsMaskedRows) {
  const Case c = fused_case();
  for (Divergence d : all_divergences()) {
    const Problem p = make_problem(c, 1, d);
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64);
    const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F64);
    const auto forward =
        losses::distribution_loss_forward(student, teacher, Tensor::from_ints(p.labels, {p.rows}), options_for(d));
    Tensor buffer = Tensor::full(student.shape(), 0.5, DType::F64);
    const Tensor two = Tensor::scalar(2.0, DType::F64);
    losses::distribution_loss_backward(student, teacher, forward.saved, two, buffer, true);
    losses::distribution_loss_backward(student, teacher, forward.saved, two, buffer, true);
    const Reference ref = reference_for(c, p, options_for(d), DType::F64, DType::F64);
    const auto got = buffer.to_doubles();
    for (int64_t i = 0; i < p.rows; ++i) {
      for (int64_t j = 0; j < p.vocab; ++j) {
        const size_t k = static_cast<size_t>(i * p.vocab + j);
        if (p.labels[i] == c.options.ignore_index) {
          ASSERT_EQ(got[k], 0.5) << "masked row " << i << " was written";
        } else {
          ASSERT_NEAR(got[k], 0.5 + 4 * ref.grad[k], 1e-12) << i << ", " << j;
        }
      }
    }
  }
}

TEST(DistributionLossFusedApi, TwoBackwardPassesAccumulateOnTheLeaf) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1, Divergence::ReverseKL);
  const Tensor labels = Tensor::from_ints(p.labels, {p.rows});
  const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F64);
  Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64).set_requires_grad();
  const auto o = options_for(Divergence::ReverseKL);
  losses::distribution_loss(student, teacher, labels, o).backward();
  losses::distribution_loss(student, teacher, labels, o).backward();
  const Reference ref = reference_for(c, p, o, DType::F64, DType::F64);
  std::vector<double> twice = ref.grad;
  for (double& g : twice) g *= 2;
  EXPECT_LE(grad_error(student.grad().to_doubles(), twice, ref.grad_unit), 1e-12);
}

// The teacher is a constant: a teacher that requires a gradient gets none.
TEST(DistributionLossFusedApi, TheTeacherGetsNoGradient) {
  Tensor student = Tensor::full({2, 5}, 0.5, DType::F32).set_requires_grad();
  Tensor teacher = Tensor::from_doubles({1, 2, 3, 4, 5, 5, 4, 3, 2, 1}, {2, 5}, DType::F32).set_requires_grad();
  losses::distribution_loss(student, teacher, Tensor()).backward();
  EXPECT_TRUE(student.grad().defined());
  EXPECT_FALSE(teacher.grad().defined());
}

TEST(DistributionLossFusedApi, AllMaskedGivesExactZeros) {
  for (Divergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
      Tensor student = Tensor::full({3, 7}, 1.5, dtype).set_requires_grad();
      const Tensor teacher = Tensor::full({3, 7}, -0.5, dtype);
      Tensor loss =
          losses::distribution_loss(student, teacher, Tensor::from_ints({-100, -100, -100}, {3}), options_for(d));
      EXPECT_EQ(loss.item(), 0.0);
      loss.backward();
      for (double g : student.grad().to_doubles()) ASSERT_EQ(g, 0.0);
    }
  }
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

// ---- groups -------------------------------------------------------------------------------------------------

TEST(DistributionLossGroups, GroupFromOptionsEqualsGroupFromSharding) {
  Case c = fused_case();
  c.temperatures = {2.5};
  c.t_squared = {true};
  const CaseJobs cj = jobs_for(c, 2);
  const auto from_sharding = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, Device::cpu());
  const auto from_options = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, Device::cpu(), {.group_in_options = true});
  loss_testing::expect_same_runs(from_sharding, from_options);
}

TEST(DistributionLossGroups, AGroupOfOneRankOrReplicatedLogitsRunNoCollective) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1, Divergence::ForwardKL);
  const auto o = options_for(Divergence::ForwardKL);
  const Reference ref = reference_for(c, p, o, DType::F64, DType::F64);
  loss_testing::expect_local_without_collectives(
      p.student, p.rows, p.vocab, ref.loss, ref.grad, ref.grad_unit, [&](const Tensor& student) {
        const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F64);
        return losses::distribution_loss(student, teacher, Tensor::from_ints(p.labels, {p.rows}), o);
      });
}

// One global problem split 1, 2 or 4 ways gives one loss.
TEST(DistributionLossGroups, TheLossDoesNotDependOnTheSplit) {
  Case c = fused_case();
  c.vocab_local = 48;
  const Problem global = make_problem(c, 1, Divergence::SoftCrossEntropy);
  std::vector<double> losses_seen;
  for (int tp : {1, 2, 4}) {
    Problem p = global;
    p.vocab_local = p.vocab / tp;
    Job job;
    job.options = options_for(Divergence::SoftCrossEntropy, 1.5);
    job.problem = &p;
    const auto results = run_tp(c, {job}, tp, DType::F64, DType::F64, Device::cpu());
    losses_seen.push_back(results[0][0].loss);
  }
  EXPECT_NEAR(losses_seen[1], losses_seen[0], 1e-12 * std::abs(losses_seen[0]));
  EXPECT_NEAR(losses_seen[2], losses_seen[0], 1e-12 * std::abs(losses_seen[0]));
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

TEST(DistributionLossErrors, StudentShardedOnAnotherDim) {
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> gloo) {
        Tensor s = Tensor::zeros({4, 10}, DType::F32);
        s.set_sharding({0, 1, gloo});
        const std::string m = error_of(s, Tensor::zeros({4, 10}), Tensor());
        EXPECT_NE(m.find("sharded on dim 0"), std::string::npos) << m;
        EXPECT_NE(m.find("not on the vocabulary"), std::string::npos) << m;
      },
      test_gloo_options());
}

}  // namespace
}  // namespace retort::kd_testing
