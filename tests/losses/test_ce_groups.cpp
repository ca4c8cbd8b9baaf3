// Where the group comes from and what crosses it: options.group and logits.sharding() give the same result,
// a group of one rank runs no collective, replicated logits stay local, and one global problem split 1, 2 or
// 4 ways gives one loss (the Megatron smoothing bug made it depend on the shard size).
#include <gtest/gtest.h>

#include "ce_test_support.h"

namespace retort::ce_testing {
namespace {

Case smoothing_case() {
  Case c;
  c.name = "groups";
  c.options.label_smoothing = 0.1;
  c.options.z_loss = 1e-3;
  return c;
}

TEST(CrossEntropyGroups, GroupFromOptionsEqualsGroupFromSharding) {
  const Case c = smoothing_case();
  const Problem p = make_problem(c, 2);
  const auto from_sharding = run_tp(c, p, 2, DType::F32, Device::cpu());
  const auto from_options = run_tp(c, p, 2, DType::F32, Device::cpu(), {.group_in_options = true});
  loss_testing::expect_same_runs({from_sharding}, {from_options});
}

TEST(CrossEntropyGroups, AGroupOfOneRankRunsNoCollective) {
  const Case c = smoothing_case();
  const Problem p = make_problem(c, 1);
  const Reference ref = dense_reference(p, p.logits, c.options);
  run_ranks(1, [&](std::shared_ptr<Communicator> gloo) {
    auto group = std::make_shared<RecordingCommunicator>(gloo);
    Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
    logits.set_sharding({1, 1, group});
    CrossEntropyOptions options = c.options;
    options.group = group;
    Tensor loss = losses::cross_entropy(logits.set_requires_grad(), Tensor::from_ints(p.targets, {p.rows}), options);
    loss.backward();
    EXPECT_TRUE(group->calls().empty());
    EXPECT_LE(loss_error(loss.item(), ref.loss), 1e-12);
    EXPECT_LE(scaled_error(logits.grad().to_doubles(), ref.grad), 1e-11);
  });
}

TEST(CrossEntropyGroups, ReplicatedLogitsAreComputedLocally) {
  const Case c = smoothing_case();
  const Problem p = make_problem(c, 1);
  const Reference ref = dense_reference(p, p.logits, c.options);
  run_ranks(
      2,
      [&](std::shared_ptr<Communicator> gloo) {
        auto group = std::make_shared<RecordingCommunicator>(gloo);
        Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
        logits.set_sharding({-1, 1, group});  // every rank holds the whole vocabulary
        Tensor loss =
            losses::cross_entropy(logits.set_requires_grad(), Tensor::from_ints(p.targets, {p.rows}), c.options);
        loss.backward();
        EXPECT_TRUE(group->calls().empty());
        EXPECT_LE(loss_error(loss.item(), ref.loss), 1e-12);
        EXPECT_LE(scaled_error(logits.grad().to_doubles(), ref.grad), 1e-11);
      },
      test_gloo_options());
}

// V = 148 split into shards of 148, 74 and 37: the loss and the assembled gradient do not depend on the split.
TEST(CrossEntropyGroups, OneGlobalProblemGivesOneLossAtEveryTp) {
  Case c = smoothing_case();
  c.vocab_local = 148;
  const Problem whole = make_problem(c, 1);
  const Reference ref = dense_reference(whole, whole.logits, c.options);
  for (int tp : {1, 2, 4}) {
    Problem p = whole;
    p.vocab_local = whole.vocab / tp;
    const auto results = run_tp(c, p, tp, DType::F64, Device::cpu());
    for (int r = 0; r < tp; ++r) {
      EXPECT_LE(loss_error(results[r].loss, ref.loss), 1e-13) << "tp " << tp << " rank " << r;
      EXPECT_LE(scaled_error(results[r].grad, column_slice(ref.grad, p, r)), 1e-12) << "tp " << tp << " rank " << r;
    }
  }
}

// A batch with no rows: loss 0, no collective needed (every rank skips them together), an empty gradient.
TEST(CrossEntropyGroups, EmptyBatchAtTpTwo) {
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> gloo) {
        Tensor logits = Tensor::zeros({0, 5}, DType::F32).set_requires_grad();
        logits.set_sharding({1, 1, gloo});
        Tensor loss = losses::cross_entropy(logits, Tensor::from_ints({}, {0}));
        EXPECT_EQ(loss.item(), 0.0);
        loss.backward();
        EXPECT_EQ(logits.grad().numel(), 0);
      },
      test_gloo_options());
}

}  // namespace
}  // namespace retort::ce_testing
