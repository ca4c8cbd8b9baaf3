// The analytic LOCAL gradient of every top-k divergence (with and without the CE mix) against central finite
// differences of the loss, in float64, at tp 2: the owner of a student logit perturbs it, both ranks recompute
// the (collective) forward, and the owner compares. Probes cover both shards, members of S and the tail;
// -inf entries, masked rows, a teacher whose k values hold all the mass (so W = sum p + p_rest != 1 exactly)
// and a student with almost all its mass on S are in the problems too.
#include <gtest/gtest.h>

#include "topk_kd_test_support.h"

namespace retort::topk_testing {
namespace {

void expect_finite_differences_match(const Case& c, const Problem& p, const TopkDistillationOptions& options) {
  SCOPED_TRACE(c.name + " " + divergence_name(options.divergence) + " T " + std::to_string(options.temperature) +
               " kd " + std::to_string(options.kd_ratio));
  constexpr int tp = 2;
  std::vector<std::pair<int64_t, int64_t>> probes;  // (row, global column) of finite student logits
  for (int64_t i = 0; i < p.rows; i += 4) {
    for (int64_t s = 0; s < std::min<int64_t>(p.k, 2); ++s) probes.emplace_back(i, p.indices[i * p.k + s]);
    for (int64_t n = 0; n < 3; ++n) probes.emplace_back(i, (i * 31 + n * 17 + 7) % p.vocab);
  }
  std::erase_if(probes, [&](const auto& pr) { return !std::isfinite(p.student[pr.first * p.vocab + pr.second]); });
  run_ranks(
      tp,
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const TopkTargets targets = targets_of(c, p, {p.rows}, DType::F64, Device::cpu());
        const std::vector<double> local = column_slice(p.student, p, rank);
        auto loss_at = [&](const std::vector<double>& values) {
          const Tensor student = loss_testing::sharded_f64(values, p.rows, p.vocab_local, group);
          return losses::topk_distillation_forward(student, targets, options).loss.item();
        };
        Tensor student = loss_testing::sharded_f64(local, p.rows, p.vocab_local, group);
        student.set_requires_grad();
        losses::topk_distillation_loss(student, targets, options).backward();
        const std::vector<double> grad = student.grad().to_doubles();
        const double worst = loss_testing::expect_finite_differences(rank, p.vocab_local, local, grad, probes, loss_at);
        ErrorLog::get().note("topk finite differences f64 " + divergence_name(options.divergence), 0, worst);
      },
      test_gloo_options());
}

// Every divergence of the case at T = 1 with kd_ratio 1 and at T = 2.5 with `ratio` (the CE mix when < 1).
void check_case(const Case& c, double ratio) {
  for (TopkDivergence d : c.divergences)
    for (const auto& [t, kd] : {std::pair{1.0, 1.0}, std::pair{2.5, ratio}}) {
      TopkDistillationOptions o = c.options;
      o.divergence = d;
      o.temperature = t;
      o.kd_ratio = kd;
      o.forward_weight = 0.3;
      o.targets_at_temperature = t != 1.0 && rest_bucket(d);
      const Problem p = make_problem(c, 2, o.targets_at_temperature ? t : 1.0);
      expect_finite_differences_match(c, p, o);
    }
}

TEST(TopkDistillationFiniteDifferences, EveryDivergenceTemperatureAndCeMix) {
  Case c;
  c.name = "fd";
  c.rows = 12;
  c.vocab_local = 19;
  c.k = 7;
  check_case(c, 0.6);
}

TEST(TopkDistillationFiniteDifferences, MinusInfEntriesMaskAndSum) {
  Case c;
  c.name = "fd_minus_inf";
  c.rows = 12;
  c.vocab_local = 19;
  c.k = 7;
  c.inf_logprobs = true;
  c.inf_student_tail = true;
  c.mask = true;
  c.options.reduction = Reduction::Sum;
  check_case(c, 0.6);
}

// p_rest is the clamped ~1e-7 here: the gradient is the derivative of the loss as computed (W = P + p_rest).
TEST(TopkDistillationFiniteDifferences, TeacherTailMassZero) {
  Case c;
  c.name = "fd_full_mass";
  c.rows = 9;
  c.vocab_local = 19;
  c.k = 7;
  c.teacher_full_mass = true;
  c.divergences = {TopkDivergence::ForwardKLRest, TopkDivergence::ReverseKL};
  check_case(c, 1.0);
}

// q_rest ~ e^-12: the tail's gradient q_j (W - p_rest / q_rest) is dominated by p_rest q_j / q_rest.
TEST(TopkDistillationFiniteDifferences, StudentMassOnTop) {
  Case c;
  c.name = "fd_mass_on_top";
  c.rows = 9;
  c.vocab_local = 19;
  c.k = 7;
  c.student_top_boost = 12;
  c.divergences = {TopkDivergence::ForwardKLRest, TopkDivergence::ReverseKL};
  check_case(c, 1.0);
}

}  // namespace
}  // namespace retort::topk_testing
