// The CPU path of the top-k distillation losses against the float64 dense reference at tp 1, 2 and 4, and 8 on
// a few cases (Gloo thread ranks): every rank's loss and LOCAL gradient, for the four divergences, T in {1, 2.5} with
// and without the T^2 scaling, with and without the CE mix, f64, f32 and bf16 student logits, over the edge cases of
// reference_cases(). Tolerances: tolerance_for().
#include <gtest/gtest.h>

#include "topk_kd_test_support.h"

namespace retort::topk_testing {
namespace {

class TopkDistillationReferenceCpu : public ::testing::TestWithParam<Case> {};

TEST_P(TopkDistillationReferenceCpu, EveryRankMatchesTheDenseReference) {
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F64, DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, Device::cpu(), "topk cpu vs f64 reference");
}

INSTANTIATE_TEST_SUITE_P(Cases, TopkDistillationReferenceCpu, ::testing::ValuesIn(reference_cases()), case_name);

// tp 8: the four divergences at T 1 and 2.5 with the CE mix on the plain masked case (f32), and k = 13 over shards
// of 8 columns (bf16). The full grid above stops at tp 4: 8 thread ranks on a small CPU pay mostly for collective
// latency, so tp 8 checks what the shard count changes and keeps CI short.
TEST(TopkDistillationReferenceCpu8, EveryRankMatchesTheDenseReferenceAtTp8) {
  Case masked = loss_testing::case_named(reference_cases(), "masked_mean");
  masked.without_t_squared = false;
  expect_matches_reference(masked, 8, DType::F32, Device::cpu(), "topk cpu vs f64 reference, tp 8");
  Case k_over_shard = loss_testing::case_named(reference_cases(), "k_over_shard");
  k_over_shard.with_ce = false;
  expect_matches_reference(k_over_shard, 8, DType::BF16, Device::cpu(), "topk cpu vs f64 reference, tp 8");
}

}  // namespace
}  // namespace retort::topk_testing
