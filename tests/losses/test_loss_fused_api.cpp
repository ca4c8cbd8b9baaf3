// The tape-free entry points a fused trainer uses, for every loss family: the forward records nothing, the
// backward writes or adds into a caller's buffer (an f32 accumulator for bf16 logits included), scaled by a
// grad_output tensor, and leaves masked rows alone when accumulating; two autograd passes add up on the leaf; an
// all-masked batch gives exact zeros.
#include <gtest/gtest.h>

#include "loss_families.h"

namespace retort::loss_testing {
namespace {

template <typename F>
class LossFusedApi : public ::testing::Test {};
TYPED_TEST_SUITE(LossFusedApi, LossFamilies, FamilyNames);

TYPED_TEST(LossFusedApi, BackwardIntoABufferEqualsTheAutogradGradient) {
  expect_backward_into_a_buffer_equals_autograd<TypeParam>();
}

TYPED_TEST(LossFusedApi, AnF32BufferForBf16Logits) {
  expect_f32_buffer_for_bf16_logits<TypeParam>();
}

TYPED_TEST(LossFusedApi, AccumulateAddsScaledGradientsAndSkipsMaskedRows) {
  expect_accumulate_adds_scaled_gradients_and_skips_masked_rows<TypeParam>();
}

TYPED_TEST(LossFusedApi, TwoBackwardPassesAccumulateOnTheLeaf) {
  expect_two_backward_passes_accumulate_on_the_leaf<TypeParam>();
}

TYPED_TEST(LossFusedApi, AllMaskedGivesExactZeros) {
  expect_all_masked_gives_exact_zeros<TypeParam>(7, {DType::F32, DType::BF16, DType::F64}, Device::cpu());
}

}  // namespace
}  // namespace retort::loss_testing
