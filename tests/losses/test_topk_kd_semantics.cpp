// What only the top-k distillation losses have: the backward in place over the logits, the CE mix against the
// cross-entropy op, the temperature semantics against the full teacher distribution, the teacher itself giving
// zero, and their bad inputs named (the checks every loss family shares are in test_loss_*.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "losses/cross_entropy.h"
#include "tests/test_support.h"
#include "topk_distillation_family.h"

namespace retort::loss_testing {
namespace {

using losses::TopkDistillationOptions;
using losses::TopkTargets;
using retort::testing::message_of;
using topk::all_divergences;
using topk::Case;
using topk::Divergence;
using topk::divergence_name;
using topk::fused_case;
using topk::log_sum_exp;
using topk::make_problem;
using topk::options_for;
using topk::Problem;
using topk::targets_for;

// The fused case with every cached log-prob and student logit finite and no labels, where the closed forms
// below hold.
Case finite_case() {
  Case c = fused_case();
  c.inf_logprobs = false;
  c.inf_student_tail = false;
  c.labels = false;
  return c;
}

// The tape-free forward's loss on the whole problem (f64 logits and cache) within 1e-12 of `expected`.
void expect_forward_loss(const Case& c, const Problem& p, const TopkDistillationOptions& o, double expected) {
  const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64);
  const double got = losses::topk_distillation_forward(student, targets_for(c, p, DType::F64), o).loss.item();
  EXPECT_LE(loss_error(got, expected), 1e-12) << got << " vs " << expected;
}

TEST(TopkDistillationFusedApi, BackwardInPlaceOverTheLogits) {
  topk::expect_backward_in_place_over_the_logits(topk::fused_case(), {DType::F32, DType::BF16, DType::F64},
                                                 Device::cpu());
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
          TopkDistillationOptions o = options_for(Divergence::ForwardKLRenormalized, 0.0);
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
  TopkDistillationOptions o = options_for(Divergence::ForwardKLRenormalized, 1.0);
  o.temperature = T;
  expect_forward_loss(c, p, o, expected * T * T / static_cast<double>(p.rows));
}

// With a cache made at T (targets_at_temperature), the rest-bucket forward KL is the (k+1)-category KL between
// the FULL teacher at T, softmax(t / T), and the student at T, both with their tails summed directly.
TEST(TopkDistillationFusedApi, RestBucketWithACacheAtTIsTheFullTeacherAtT) {
  const Case c = finite_case();
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
  TopkDistillationOptions o = options_for(Divergence::ForwardKLRest, 1.0);
  o.temperature = T;
  o.targets_at_temperature = true;
  expect_forward_loss(c, p, o, expected * T * T / static_cast<double>(p.rows));
}

// Identical (k+1)-category distributions: every divergence is 0, as is its gradient.
TEST(TopkDistillationFusedApi, TheTeacherItselfGivesZero) {
  const Case c = finite_case();
  Problem p = make_problem(c, 1);
  p.student = p.teacher;  // the student is the teacher the cache came from
  for (Divergence d : all_divergences()) {
    Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64).set_requires_grad();
    Tensor loss = losses::topk_distillation_loss(student, targets_for(c, p, DType::F64), options_for(d, 1.0));
    EXPECT_NEAR(loss.item(), 0.0, 1e-13) << divergence_name(d);
    loss.backward();
    for (double g : student.grad().to_doubles()) ASSERT_NEAR(g, 0.0, 1e-13) << divergence_name(d);
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
  o.divergence = Divergence::Mixed;
  o.forward_weight = 2;
  expect_error(s, good_targets(), "forward_weight must be in [0, 1]", o);
  o = {};
  o.temperature = 2;
  for (Divergence d : {Divergence::ForwardKLRest, Divergence::ReverseKL, Divergence::Mixed}) {
    o.divergence = d;
    expect_error(s, good_targets(), "set targets_at_temperature", o);
  }
  o.divergence = Divergence::ForwardKLRenormalized;
  EXPECT_NO_THROW(losses::topk_distillation_loss(s, good_targets(), o));
  o.temperature = 0;
  expect_error(s, good_targets(), "temperature must be a positive number", o);
  o = {};
  o.normalizer = -1.0;
  expect_error(s, good_targets(), "normalizer must be positive", o);
  expect_error(Tensor::zeros({4, 10}, DType::I32), good_targets(), "need a floating dtype");
}

}  // namespace
}  // namespace retort::loss_testing
