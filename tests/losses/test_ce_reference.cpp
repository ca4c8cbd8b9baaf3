// The CPU path against the float64 dense reference at tp 1, 2 and 4 (Gloo thread ranks): every rank's loss and
// LOCAL gradient, for f64, f32 and bf16 logits, over losses.md's edge cases. Tolerances: tolerance_for().
#include <gtest/gtest.h>

#include "ce_test_support.h"

namespace retort::ce_testing {
namespace {

class CrossEntropyReferenceCpu : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyReferenceCpu, EveryRankMatchesTheDenseReference) {
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F64, DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, Device::cpu(), "cpu vs f64 reference");
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyReferenceCpu, ::testing::ValuesIn(reference_cases()), case_name);

// The worst errors of the whole run, for the record.
[[maybe_unused]] auto* const kPrintErrorLog =
    ::testing::AddGlobalTestEnvironment(new loss_testing::PrintErrorLog<ErrorLog>);

}  // namespace
}  // namespace retort::ce_testing
