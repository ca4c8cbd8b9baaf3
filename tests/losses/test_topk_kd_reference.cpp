// The CPU path of the top-k distillation losses against the float64 dense reference at tp 1, 2 and 4 (Gloo
// thread ranks): every rank's loss and LOCAL gradient, for the four divergences, T in {1, 2.5} with and without
// the T^2 scaling, with and without the CE mix, f64, f32 and bf16 student logits, over the edge cases of
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

}  // namespace
}  // namespace retort::topk_testing
