// The analytic LOCAL gradient of every divergence against central finite differences of the loss, in float64,
// at tp 2: the owner of a student logit perturbs it, both ranks recompute the (collective) forward, and the
// owner compares. Probes cover both shards; -inf entries and masked rows are in the problem too.
#include <gtest/gtest.h>

#include "kd_test_support.h"

namespace retort::kd_testing {
namespace {

void expect_finite_differences_match(const Case& c, const DistributionLossOptions& options) {
  SCOPED_TRACE(c.name + " " + divergence_name(options.divergence) + " T " + std::to_string(options.temperature) +
               (options.scale_by_t_squared ? " x T^2" : ""));
  constexpr int tp = 2;
  const Problem p = make_problem(c, tp, options.divergence);
  std::vector<std::pair<int64_t, int64_t>> probes;  // (row, global column) of finite student logits
  for (int64_t i = 0; i < p.rows; i += 3)
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t j = (i * 31 + k * 17 + 7) % p.vocab;
      if (std::isfinite(p.student[i * p.vocab + j])) probes.emplace_back(i, j);
    }
  run_ranks(
      tp,
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Tensor labels = Tensor::from_ints(p.labels, {p.rows});
        const std::vector<double> local = column_slice(p.student, p, rank);
        Tensor teacher = Tensor::from_doubles(column_slice(p.teacher, p, rank), {p.rows, p.vocab_local}, DType::F64);
        auto loss_at = [&](const std::vector<double>& values) {
          const Tensor student = loss_testing::sharded_f64(values, p.rows, p.vocab_local, group);
          return losses::distribution_loss_forward(student, teacher, labels, options).loss.item();
        };
        Tensor student = loss_testing::sharded_f64(local, p.rows, p.vocab_local, group);
        student.set_requires_grad();
        losses::distribution_loss(student, teacher, labels, options).backward();
        const std::vector<double> grad = student.grad().to_doubles();
        const double worst = loss_testing::expect_finite_differences(rank, p.vocab_local, local, grad, probes, loss_at);
        ErrorLog::get().note("finite differences f64 " + divergence_name(options.divergence), 0, worst);
      },
      test_gloo_options());
}

TEST(DistributionLossFiniteDifferences, EveryDivergenceTemperatureAndScaling) {
  Case c;
  c.name = "fd";
  for (Divergence d : all_divergences())
    for (double t : {1.0, 2.5})
      for (bool sq : {true, false}) {
        DistributionLossOptions o;
        o.divergence = d;
        o.temperature = t;
        o.scale_by_t_squared = sq;
        expect_finite_differences_match(c, o);
      }
}

TEST(DistributionLossFiniteDifferences, MinusInfEntriesAndSum) {
  Case c;
  c.name = "fd_minus_inf";
  c.inf_entries = true;
  c.inf_teacher_shard = true;
  c.inf_student_shard = true;
  c.options.reduction = Reduction::Sum;
  for (Divergence d : all_divergences()) {
    DistributionLossOptions o = c.options;
    o.divergence = d;
    o.temperature = 2.5;
    expect_finite_differences_match(c, o);
  }
}

}  // namespace
}  // namespace retort::kd_testing
