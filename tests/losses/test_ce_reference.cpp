// The CPU path against the float64 dense reference at tp 1, 2 and 4 (Gloo thread ranks): every rank's loss and
// LOCAL gradient, for f64, f32 and bf16 logits, over losses.md's edge cases; tp 8 on the smoothing cases. Tolerances:
// tolerance_for().
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

// tp 8: label smoothing in both conventions (the uniform term sums over all 8 shards), a -inf shard and a wide
// shard, one dtype each. The full grid above stops at tp 4: 8 thread ranks on a small CPU pay mostly for
// connections and collective latency, so tp 8 checks what the shard count changes and keeps CI short.
TEST(CrossEntropyReferenceCpu8, EveryRankMatchesTheDenseReferenceAtTp8) {
  const std::vector<std::pair<std::string, DType>> runs = {{"megatron_smoothing", DType::F32},
                                                           {"pytorch_smoothing", DType::BF16},
                                                           {"minus_inf_shard_smoothing", DType::F64},
                                                           {"wide_shard_1031", DType::F32}};
  for (const auto& [name, dtype] : runs)
    expect_matches_reference(loss_testing::case_named(reference_cases(), name), 8, dtype, Device::cpu(),
                             "cpu vs f64 reference, tp 8");
}

// The worst errors of the whole run, for the record.
[[maybe_unused]] auto* const kPrintErrorLog =
    ::testing::AddGlobalTestEnvironment(new loss_testing::PrintErrorLog<ErrorLog>);

}  // namespace
}  // namespace retort::ce_testing
