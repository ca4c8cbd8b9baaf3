// Where every loss family's group comes from and what crosses it: options.group and the logits' sharding give the
// same result, a group of one rank and replicated logits run no collective, one global problem split 1, 2 or 4
// ways gives one loss (the Megatron smoothing bug made the cross-entropy depend on the shard size), an empty batch
// at tp 2 needs no collective, and logits sharded on another dim are refused by name.
#include <gtest/gtest.h>

#include "loss_families.h"

namespace retort::loss_testing {
namespace {

template <typename F>
class LossGroups : public ::testing::Test {};
TYPED_TEST_SUITE(LossGroups, LossFamilies, FamilyNames);

TYPED_TEST(LossGroups, GroupFromOptionsEqualsGroupFromSharding) {
  expect_group_from_options_equals_group_from_sharding<TypeParam>();
}

TYPED_TEST(LossGroups, AGroupOfOneRankOrReplicatedLogitsRunNoCollective) {
  expect_local_without_collectives<TypeParam>();
}

TYPED_TEST(LossGroups, TheLossDoesNotDependOnTheSplit) {
  expect_the_loss_does_not_depend_on_the_split<TypeParam>();
}

TYPED_TEST(LossGroups, APaddedLastShardEqualsTheDenseLossAtTpTwoThreeAndFour) {
  expect_a_padded_last_shard_to_equal_the_dense_loss<TypeParam>();
}

TYPED_TEST(LossGroups, UnequalShardsAreRefusedWithTheNumbers) {
  expect_unequal_shards_to_be_refused<TypeParam>();
}

TYPED_TEST(LossGroups, EmptyBatchAtTpTwo) {
  expect_empty_batch_at_tp_two<TypeParam>();
}

template <typename F>
class LossErrors : public ::testing::Test {};
TYPED_TEST_SUITE(LossErrors, LossFamilies, FamilyNames);

TYPED_TEST(LossErrors, LogitsShardedOnAnotherDim) {
  expect_logits_sharded_on_another_dim_are_named<TypeParam>();
}

}  // namespace
}  // namespace retort::loss_testing
