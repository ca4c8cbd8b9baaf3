// Every loss family's CPU path against its float64 dense reference at tp 1, 2 and 4 (Gloo thread ranks): every
// rank's loss and LOCAL gradient, for f64, f32 and bf16 logits, over the family's edge cases (the KD losses for
// each divergence, T in {1, 2.5} with and without the T^2 scaling; the top-k losses also with and without the CE
// mix); tp 8 on a few cases; a KD teacher stored in another dtype than the student. Tolerances: each family's
// tolerance_for().
#include <gtest/gtest.h>

#include "loss_families.h"

namespace retort::loss_testing {
namespace {

class LossReferenceCpu : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(LossReferenceCpu, EveryRankMatchesTheDenseReference) {
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F64, DType::F32, DType::BF16})
      GetParam().expect_matches_reference(tp, dtype, Device::cpu(), "cpu vs f64 reference", {});
}

INSTANTIATE_TEST_SUITE_P(Cases, LossReferenceCpu, ::testing::ValuesIn(all_reference_cases()), param_name<FamilyCase>);

// tp 8 on each family's few runs (tp8_runs). The full grid above stops at tp 4: 8 thread ranks on a small CPU pay
// mostly for connections and collective latency, so tp 8 checks what the shard count changes and keeps CI short.
template <typename F>
class LossReferenceCpu8 : public ::testing::Test {};
TYPED_TEST_SUITE(LossReferenceCpu8, LossFamilies, FamilyNames);

TYPED_TEST(LossReferenceCpu8, EveryRankMatchesTheDenseReferenceAtTp8) {
  using F = TypeParam;
  for (const auto& [c, dtype] : F::tp8_runs())
    expect_matches_reference<F>(c, 8, dtype, Device::cpu(), "cpu vs f64 reference, tp 8");
}

// The teacher may come in another float dtype than the student (a bf16 teacher for an f32 student, say).
TEST(DistributionLossCpu, TeacherInAnotherDtype) {
  using F = DistributionLossFamily;
  const F::Case c = kd::mixed_dtypes_case();
  for (int tp : {1, 2}) {
    expect_matches_reference<F>(c, tp, DType::F32, DType::BF16, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference<F>(c, tp, DType::BF16, DType::F32, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference<F>(c, tp, DType::F32, DType::F64, Device::cpu(), "cpu vs f64 reference");
    expect_matches_reference<F>(c, tp, DType::F64, DType::F32, Device::cpu(), "cpu vs f64 reference");
  }
}

// The worst errors of the whole run, for the record.
[[maybe_unused]] auto* const kPrintCrossEntropyLog =
    ::testing::AddGlobalTestEnvironment(new PrintErrorLog<CrossEntropyFamily::Log>);
[[maybe_unused]] auto* const kPrintDistillationLog =
    ::testing::AddGlobalTestEnvironment(new PrintErrorLog<DistributionLossFamily::Log>);

}  // namespace
}  // namespace retort::loss_testing
