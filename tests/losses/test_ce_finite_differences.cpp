// The analytic LOCAL gradient against central finite differences of the loss, in float64, at tp 2: the owner
// of a logit perturbs it, both ranks recompute the (collective) forward, and the owner compares. Probes cover
// target logits, other logits and both shards.
#include <gtest/gtest.h>

#include "ce_test_support.h"

namespace retort::ce_testing {
namespace {

void expect_finite_differences_match(const Case& c) {
  SCOPED_TRACE(c.name);
  constexpr int tp = 2;
  const Problem p = make_problem(c, tp);
  // Every row's target column (on whichever rank owns it) and a spread of other columns.
  std::vector<std::pair<int64_t, int64_t>> probes;
  for (int64_t i = 0; i < p.rows; i += 5) {
    if (p.targets[i] >= 0) probes.emplace_back(i, p.targets[i]);
    probes.emplace_back(i, (i * 31 + 7) % p.vocab);
  }
  run_ranks(
      tp,
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Tensor targets = Tensor::from_ints(p.targets, {p.rows});
        const std::vector<double> local = column_slice(p.logits, p, rank);
        auto loss_at = [&](const std::vector<double>& values) {
          const Tensor logits = loss_testing::sharded_f64(values, p.rows, p.vocab_local, group);
          return losses::cross_entropy_forward(logits, targets, c.options).loss.item();
        };
        Tensor logits = loss_testing::sharded_f64(local, p.rows, p.vocab_local, group);
        logits.set_requires_grad();
        losses::cross_entropy(logits, targets, c.options).backward();
        const std::vector<double> grad = logits.grad().to_doubles();
        const double worst = loss_testing::expect_finite_differences(rank, p.vocab_local, local, grad, probes, loss_at);
        ErrorLog::get().note("finite differences f64", 0, worst);
      },
      test_gloo_options());
}

TEST(CrossEntropyFiniteDifferences, MegatronSmoothingAndZLoss) {
  Case c;
  c.name = "fd_megatron";
  c.options.label_smoothing = 0.1;
  c.options.z_loss = 1e-2;
  expect_finite_differences_match(c);
}

TEST(CrossEntropyFiniteDifferences, SumWithMinusInfAndPyTorchSmoothing) {
  Case c;
  c.name = "fd_pytorch";
  c.neg_inf_entries = true;  // no smoothing mass may sit on them, or the loss is +inf: smoothing off here
  c.options.reduction = Reduction::Sum;
  c.options.z_loss = 1e-3;
  expect_finite_differences_match(c);
  c.name = "fd_pytorch_smoothing";
  c.neg_inf_entries = false;
  c.options.label_smoothing = 0.3;
  c.options.smoothing_convention = LabelSmoothingConvention::PyTorch;
  expect_finite_differences_match(c);
}

}  // namespace
}  // namespace retort::ce_testing
