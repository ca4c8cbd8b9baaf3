// The tape-free entry points a fused trainer uses (the forward records nothing, the backward writes or adds into
// a caller's buffer, an f32 accumulator for bf16 logits included, and leaves masked rows alone when
// accumulating); the CE mix against the cross-entropy op; the temperature semantics against the full teacher
// distribution; where the group comes from and what crosses it; bad inputs.
#include <gtest/gtest.h>

#include "losses/cross_entropy.h"
#include "tests/test_support.h"
#include "topk_kd_test_support.h"

namespace retort::topk_testing {
namespace {

using retort::testing::message_of;

Case fused_case() {
  Case c;
  c.name = "fused";
  c.vocab_local = 53;
  c.k = 11;
  c.inf_logprobs = true;
  c.inf_student_tail = true;
  return c;
}

TopkDistillationOptions options_for(TopkDivergence d, double kd_ratio = 0.8) {
  TopkDistillationOptions o;
  o.divergence = d;
  o.kd_ratio = kd_ratio;
  return o;
}

TopkTargets targets_for(const Case& c, const Problem& p, DType cache = DType::F32) {
  return targets_of(c, p, {p.rows}, cache, Device::cpu());
}

TEST(TopkDistillationFusedApi, BackwardIntoABufferEqualsTheAutogradGradient) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  for (TopkDivergence d : all_divergences()) {
    const TopkTargets targets = targets_for(c, p);
    Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F32);
    const auto forward = losses::topk_distillation_forward(student, targets, options_for(d));
    EXPECT_FALSE(forward.loss.requires_grad());
    Tensor buffer = Tensor::empty(student.shape(), DType::F32);
    losses::topk_distillation_backward(student, forward.saved, Tensor(), buffer);

    student.set_requires_grad();
    Tensor loss = losses::topk_distillation_loss(student, targets, options_for(d));
    EXPECT_EQ(loss.item(), forward.loss.item());
    loss.backward();
    EXPECT_EQ(buffer.to_doubles(), student.grad().to_doubles()) << divergence_name(d);
  }
}

// The gradient may overwrite the logits themselves (each column is read before it is written): the fused
// trainer's way to save a [N, V/tp] buffer.
TEST(TopkDistillationFusedApi, BackwardInPlaceOverTheLogits) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  for (TopkDivergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
      const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, dtype);
      const auto forward = losses::topk_distillation_forward(student, targets_for(c, p), options_for(d));
      Tensor expected = Tensor::empty(student.shape(), dtype);
      losses::topk_distillation_backward(student, forward.saved, Tensor(), expected);
      Tensor in_place = student.clone();
      losses::topk_distillation_backward(in_place, forward.saved, Tensor(), in_place);
      EXPECT_EQ(in_place.to_doubles(), expected.to_doubles()) << divergence_name(d) << " " << dtype_name(dtype);
    }
  }
}

// bf16 logits into an f32 buffer: the gradient is not rounded to bf16, so it matches the reference to f32.
TEST(TopkDistillationFusedApi, AnF32BufferForBf16Logits) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  for (TopkDivergence d : all_divergences()) {
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::BF16);
    const auto forward = losses::topk_distillation_forward(student, targets_for(c, p), options_for(d));
    Tensor buffer = Tensor::empty(student.shape(), DType::F32);
    losses::topk_distillation_backward(student, forward.saved, Tensor(), buffer);
    const Reference ref = reference_for(c, p, options_for(d), DType::BF16, DType::F32);
    const double err = grad_error(buffer.to_doubles(), ref.grad, ref.grad_unit);
    EXPECT_LE(err, 4e-6) << divergence_name(d);
    ErrorLog::get().note("topk cpu bf16 logits, f32 grad " + divergence_name(d), 0, err);
  }
}

TEST(TopkDistillationFusedApi, AccumulateAddsScaledGradientsAndSkipsMaskedRows) {
  Case c = fused_case();
  c.mask = true;
  const Problem p = make_problem(c, 1);
  const std::vector<bool> valid = valid_rows(c, p);
  for (TopkDivergence d : all_divergences()) {
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64);
    const auto forward = losses::topk_distillation_forward(student, targets_for(c, p, DType::F64), options_for(d));
    Tensor buffer = Tensor::full(student.shape(), 0.5, DType::F64);
    const Tensor two = Tensor::scalar(2.0, DType::F64);
    losses::topk_distillation_backward(student, forward.saved, two, buffer, true);
    losses::topk_distillation_backward(student, forward.saved, two, buffer, true);
    const Reference ref = reference_for(c, p, options_for(d), DType::F64, DType::F64);
    const auto got = buffer.to_doubles();
    for (int64_t i = 0; i < p.rows; ++i) {
      for (int64_t j = 0; j < p.vocab; ++j) {
        const size_t at = static_cast<size_t>(i * p.vocab + j);
        if (!valid[i]) {
          ASSERT_EQ(got[at], 0.5) << "masked row " << i << " was written";
        } else {
          ASSERT_NEAR(got[at], 0.5 + 4 * ref.grad[at], 1e-12) << divergence_name(d) << " " << i << ", " << j;
        }
      }
    }
  }
}

TEST(TopkDistillationFusedApi, AllMaskedGivesExactZeros) {
  for (TopkDivergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
      Tensor student = Tensor::full({3, 7}, 1.5, dtype).set_requires_grad();
      TopkTargets t;
      t.indices = Tensor::from_ints({0, 3, 1, 2, 6, 5}, {3, 2});
      t.logprobs = Tensor::full({3, 2}, -1.0, DType::F32);
      t.labels = Tensor::from_ints({-100, 2, 4}, {3});
      t.mask = Tensor::from_ints({1, 0, 0}, {3});
      Tensor loss = losses::topk_distillation_loss(student, t, options_for(d, 0.5));
      EXPECT_EQ(loss.item(), 0.0);
      loss.backward();
      for (double g : student.grad().to_doubles()) ASSERT_EQ(g, 0.0);
    }
  }
}

// kd_ratio 0 is the vocab-parallel cross-entropy op itself, at T = 1 and with the CE's own raw statistics at
// T = 2.5 (the renormalized KL allows any T).
TEST(TopkDistillationFusedApi, CeOnlyEqualsTheCrossEntropyOp) {
  Case c = fused_case();
  c.scale = 3000;  // x1000 logits too
  const Problem p = make_problem(c, 2);
  for (double t : {1.0, 2.5}) {
    run_ranks(
        2,
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          Tensor student = Tensor::from_doubles(column_slice(p.student, p, rank), {p.rows, p.vocab_local}, DType::F64);
          student.set_sharding({1, 1, group});
          TopkDistillationOptions o = options_for(TopkDivergence::ForwardKLRenormalized, 0.0);
          o.temperature = t;
          Tensor a = student.detach();
          a.set_sharding({1, 1, group});
          a.set_requires_grad();
          Tensor b = student.detach();
          b.set_sharding({1, 1, group});
          b.set_requires_grad();
          Tensor topk = losses::topk_distillation_loss(a, targets_for(c, p, DType::F64), o);
          Tensor ce = losses::cross_entropy(b, Tensor::from_ints(p.labels, {p.rows}));
          EXPECT_LE(loss_error(topk.item(), ce.item()), 1e-12) << "T " << t;
          topk.backward();
          ce.backward();
          EXPECT_LE(grad_error(a.grad().to_doubles(), b.grad().to_doubles(), 1.0 / p.rows), 1e-12) << "T " << t;
        },
        test_gloo_options());
  }
}

// The renormalized KL at T from a cache made at T = 1 is the KL between softmax_S(teacher logits / T) and
// softmax_S(student logits / T): the cached values differ from the logits by one constant per row.
TEST(TopkDistillationFusedApi, RenormalizedTemperatureIsTheTeacherAtT) {
  Case c = fused_case();
  c.inf_logprobs = false;
  c.labels = false;
  const Problem p = make_problem(c, 1);
  const double T = 2.5;
  double expected = 0;
  for (int64_t i = 0; i < p.rows; ++i) {
    std::vector<double> t(static_cast<size_t>(p.k)), x(static_cast<size_t>(p.k));
    for (int64_t s = 0; s < p.k; ++s) {
      t[s] = p.teacher[i * p.vocab + p.indices[i * p.k + s]] / T;
      x[s] = p.student[i * p.vocab + p.indices[i * p.k + s]] / T;
    }
    const double lt = log_sum_exp(t), lx = log_sum_exp(x);
    for (int64_t s = 0; s < p.k; ++s) expected += std::exp(t[s] - lt) * ((t[s] - lt) - (x[s] - lx));
  }
  expected *= T * T / static_cast<double>(p.rows);
  TopkDistillationOptions o = options_for(TopkDivergence::ForwardKLRenormalized, 1.0);
  o.temperature = T;
  const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64);
  const double got = losses::topk_distillation_forward(student, targets_for(c, p, DType::F64), o).loss.item();
  EXPECT_LE(loss_error(got, expected), 1e-12) << got << " vs " << expected;
}

// With a cache made at T (targets_at_temperature), the rest-bucket forward KL is the (k+1)-category KL between
// the FULL teacher at T, softmax(t / T), and the student at T, both with their tails summed directly.
TEST(TopkDistillationFusedApi, RestBucketWithACacheAtTIsTheFullTeacherAtT) {
  Case c = fused_case();
  c.inf_logprobs = false;
  c.inf_student_tail = false;
  c.labels = false;
  const double T = 2.5;
  const Problem p = make_problem(c, 1, T);
  auto softmax = [&](const double* v) {
    std::vector<double> out(static_cast<size_t>(p.vocab));
    for (int64_t j = 0; j < p.vocab; ++j) out[j] = v[j] / T;
    const double l = log_sum_exp(out);
    for (double& e : out) e = std::exp(e - l);
    return out;
  };
  double expected = 0;
  for (int64_t i = 0; i < p.rows; ++i) {
    const auto pt = softmax(p.teacher.data() + i * p.vocab), qs = softmax(p.student.data() + i * p.vocab);
    double p_rest = 0, q_rest = 0;
    std::vector<bool> in_top(static_cast<size_t>(p.vocab), false);
    for (int64_t s = 0; s < p.k; ++s) in_top[p.indices[i * p.k + s]] = true;
    for (int64_t j = 0; j < p.vocab; ++j) {
      if (in_top[j]) {
        expected += pt[j] * std::log(pt[j] / qs[j]);
      } else {
        p_rest += pt[j];
        q_rest += qs[j];
      }
    }
    expected += p_rest * std::log(p_rest / q_rest);
  }
  expected *= T * T / static_cast<double>(p.rows);
  TopkDistillationOptions o = options_for(TopkDivergence::ForwardKLRest, 1.0);
  o.temperature = T;
  o.targets_at_temperature = true;
  const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64);
  const double got = losses::topk_distillation_forward(student, targets_for(c, p, DType::F64), o).loss.item();
  EXPECT_LE(loss_error(got, expected), 1e-12) << got << " vs " << expected;
}

// Identical (k+1)-category distributions: every divergence is 0, as is its gradient.
TEST(TopkDistillationFusedApi, TheTeacherItselfGivesZero) {
  Case c = fused_case();
  c.inf_logprobs = false;
  c.inf_student_tail = false;
  c.labels = false;
  Problem p = make_problem(c, 1);
  p.student = p.teacher;  // the student is the teacher the cache came from
  for (TopkDivergence d : all_divergences()) {
    Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64).set_requires_grad();
    Tensor loss = losses::topk_distillation_loss(student, targets_for(c, p, DType::F64), options_for(d, 1.0));
    EXPECT_NEAR(loss.item(), 0.0, 1e-13) << divergence_name(d);
    loss.backward();
    for (double g : student.grad().to_doubles()) ASSERT_NEAR(g, 0.0, 1e-13) << divergence_name(d);
  }
}

// ---- groups -------------------------------------------------------------------------------------------------

TEST(TopkDistillationGroups, GroupFromOptionsEqualsGroupFromSharding) {
  Case c = fused_case();
  c.with_temperature = false;
  const CaseJobs cj = jobs_for(c, 2);
  const auto from_sharding = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, Device::cpu());
  const auto from_options = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, Device::cpu(), {.group_in_options = true});
  loss_testing::expect_same_runs(from_sharding, from_options);
}

TEST(TopkDistillationGroups, AGroupOfOneRankOrReplicatedLogitsRunNoCollective) {
  const Case c = fused_case();
  const Problem p = make_problem(c, 1);
  const auto o = options_for(TopkDivergence::Mixed);
  const Reference ref = reference_for(c, p, o, DType::F64, DType::F64);
  loss_testing::expect_local_without_collectives(
      p.student, p.rows, p.vocab, ref.loss, ref.grad, ref.grad_unit,
      [&](const Tensor& student) { return losses::topk_distillation_loss(student, targets_for(c, p, DType::F64), o); });
}

// One global problem split 1, 2 or 4 ways gives one loss.
TEST(TopkDistillationGroups, TheLossDoesNotDependOnTheSplit) {
  Case c = fused_case();
  c.vocab_local = 48;
  const Problem global = make_problem(c, 1);
  for (TopkDivergence d : all_divergences()) {
    std::vector<double> seen;
    for (int tp : {1, 2, 4}) {
      Problem p = global;
      p.vocab_local = p.vocab / tp;
      Job job;
      job.options = options_for(d);
      job.problem = &p;
      seen.push_back(run_tp(c, {job}, tp, DType::F64, DType::F64, Device::cpu())[0][0].loss);
    }
    EXPECT_NEAR(seen[1], seen[0], 1e-12 * std::abs(seen[0])) << divergence_name(d);
    EXPECT_NEAR(seen[2], seen[0], 1e-12 * std::abs(seen[0])) << divergence_name(d);
  }
}

// ---- bad inputs ---------------------------------------------------------------------------------------------

std::string error_of(const Tensor& student, const TopkTargets& t, const TopkDistillationOptions& o = {}) {
  return message_of([&] { losses::topk_distillation_loss(student, t, o); });
}

TopkTargets good_targets() {
  TopkTargets t;
  t.indices = Tensor::from_ints({0, 3, 1, 2, 6, 5, 9, 8}, {4, 2});
  t.logprobs = Tensor::full({4, 2}, -1.0, DType::F32);
  t.labels = Tensor::from_ints({1, 2, 3, -100}, {4});
  return t;
}

void expect_error(const Tensor& s, const TopkTargets& t, const std::string& part,
                  const TopkDistillationOptions& o = {}) {
  const std::string m = error_of(s, t, o);
  EXPECT_NE(m.find(part), std::string::npos) << "expected \"" << part << "\" in: " << m;
}

TEST(TopkDistillationErrors, BadInputsAreNamed) {
  const Tensor s = Tensor::zeros({4, 10}, DType::F32);
  EXPECT_NO_THROW(losses::topk_distillation_loss(s, good_targets()));
  TopkTargets t = good_targets();
  t.indices = Tensor::zeros({4, 2}, DType::F32);
  expect_error(s, t, "teacher indices f32[4, 2] on cpu must be i32");
  t = good_targets();
  t.indices = Tensor::from_ints({0, 1, 2, 3, 4, 5}, {3, 2});
  expect_error(s, t, "do not match student logits");
  t = good_targets();
  t.logprobs = Tensor::full({4, 3}, -1.0, DType::F32);
  expect_error(s, t, "shaped like the indices");
  t = good_targets();
  t.indices = Tensor::from_ints({0, 3, 1, 2, 6, 10, 9, 8}, {4, 2});
  expect_error(s, t, "teacher index 10 at row 2, slot 1 is outside the vocabulary of 10");
  t = good_targets();
  t.indices = Tensor::from_ints({0, 3, 1, 2, 6, 6, 9, 8}, {4, 2});
  expect_error(s, t, "teacher index 6 appears twice in row 2");
  t = good_targets();
  t.mask = Tensor::zeros({4}, DType::F32);
  expect_error(s, t, "mask f32[4] on cpu do not match logits");
  TopkDistillationOptions o;
  o.kd_ratio = 0.5;
  t = good_targets();
  t.labels = Tensor();
  expect_error(s, t, "no labels were given", o);
  t = good_targets();
  t.labels = Tensor::from_ints({1, 2, 3, 10}, {4});
  expect_error(s, t, "label 10 at row 3 is outside the vocabulary of 10", o);
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    o.kd_ratio = bad;
    expect_error(s, good_targets(), "kd_ratio must be in [0, 1]", o);
  }
  o = {};
  o.divergence = TopkDivergence::Mixed;
  o.forward_weight = 2;
  expect_error(s, good_targets(), "forward_weight must be in [0, 1]", o);
  o = {};
  o.temperature = 2;
  for (TopkDivergence d : {TopkDivergence::ForwardKLRest, TopkDivergence::ReverseKL, TopkDivergence::Mixed}) {
    o.divergence = d;
    expect_error(s, good_targets(), "set targets_at_temperature", o);
  }
  o.divergence = TopkDivergence::ForwardKLRenormalized;
  EXPECT_NO_THROW(losses::topk_distillation_loss(s, good_targets(), o));
  o.temperature = 0;
  expect_error(s, good_targets(), "temperature must be a positive number", o);
  o = {};
  o.normalizer = -1.0;
  expect_error(s, good_targets(), "normalizer must be positive", o);
  expect_error(Tensor::zeros({4, 10}, DType::I32), good_targets(), "need a floating dtype");
}

TEST(TopkDistillationErrors, StudentShardedOnAnotherDim) {
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> gloo) {
        Tensor s = Tensor::zeros({4, 10}, DType::F32);
        s.set_sharding({0, 1, gloo});
        const std::string m = error_of(s, good_targets());
        EXPECT_NE(m.find("not on the vocabulary"), std::string::npos) << m;
      },
      test_gloo_options());
}

}  // namespace
}  // namespace retort::topk_testing
