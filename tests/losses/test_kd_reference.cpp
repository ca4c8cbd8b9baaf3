// The CPU path of the distribution losses against the float64 dense reference at tp 1, 2 and 4, and 8 on a few
// cases (Gloo thread ranks): every rank's loss and LOCAL gradient, for the three divergences, T in {1, 2.5} with and
// without the T^2 scaling, f64, f32 and bf16 logits, over losses.md's edge cases; a teacher stored in another dtype
// than the student. Tolerances: tolerance_for().
#include <gtest/gtest.h>

#include "kd_test_support.h"

namespace retort::kd_testing {
namespace {

class DistributionLossReferenceCpu : public ::testing::TestWithParam<Case> {};

TEST_P(DistributionLossReferenceCpu, EveryRankMatchesTheDenseReference) {
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F64, DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, dtype, Device::cpu(), "cpu vs f64 reference");
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributionLossReferenceCpu, ::testing::ValuesIn(reference_cases()), case_name);

// tp 8: forward KL, reverse KL and soft CE at T 1 and 2.5 (T^2 scaled), on the plain masked case (f32) and on
// -inf entries with whole -inf teacher and student shards (bf16). The full grid above stops at tp 4: 8 thread
// ranks on a small CPU pay mostly for collective latency, so tp 8 checks what the shard count changes and keeps
// CI short.
TEST(DistributionLossReferenceCpu8, EveryRankMatchesTheDenseReferenceAtTp8) {
  const std::vector<std::pair<std::string, DType>> runs = {{"masked_mean", DType::F32},
                                                           {"both_shards_minus_inf", DType::BF16}};
  for (const auto& [name, dtype] : runs) {
    Case c = loss_testing::case_named(reference_cases(), name);
    c.t_squared = {true};
    expect_matches_reference(c, 8, dtype, dtype, Device::cpu(), "cpu vs f64 reference, tp 8");
  }
}

// The teacher may come in another float dtype than the student (a bf16 teacher for an f32 student, say).
TEST(DistributionLossCpu, TeacherInAnotherDtype) {
  const Case c = mixed_dtypes_case();
  for (int tp : {1, 2}) {
    expect_matches_reference(c, tp, DType::F32, DType::BF16, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference(c, tp, DType::BF16, DType::F32, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference(c, tp, DType::F32, DType::F64, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference(c, tp, DType::F64, DType::F32, Device::cpu(), "cpu vs f64 reference");
  }
}

// The worst errors of the whole run, for the record.
[[maybe_unused]] auto* const kPrintErrorLog =
    ::testing::AddGlobalTestEnvironment(new loss_testing::PrintErrorLog<ErrorLog>);

}  // namespace
}  // namespace retort::kd_testing
