// Every loss family's fused CUDA kernels against its float64 dense reference on every edge case, at tp 1, 2 and 4
// as thread ranks sharing one GPU (collectives staged through Gloo), and at tp 2 over NCCL on two GPUs; against
// the CPU path at tp 2, on misaligned views, large vocabularies and (top-k) large k; the accumulate path; host
// and device targets; all-masked batches. Then what only one family has: a KD teacher in another dtype, the
// cross-entropy's device-side target checks, the top-k backward in place and its k limit. Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "loss_families.h"
#include "tests/test_support.h"

namespace retort::loss_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

class LossReferenceCuda : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(LossReferenceCuda, EveryRankMatchesTheDenseReference) {
  SKIP_WITHOUT_GPU();
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F32, DType::BF16})
      GetParam().expect_matches_reference(tp, dtype, kGpu, "cuda vs f64 reference", {});
}

TEST_P(LossReferenceCuda, TwoGpusOverNccl) {
  SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (DType dtype : {DType::F32, DType::BF16})
    GetParam().expect_matches_reference(2, dtype, kGpu, "cuda nccl vs f64 reference", {.nccl = true});
}

INSTANTIATE_TEST_SUITE_P(Cases, LossReferenceCuda, ::testing::ValuesIn(all_reference_cases()), param_name<FamilyCase>);

template <typename F>
class LossCuda : public ::testing::Test {};
TYPED_TEST_SUITE(LossCuda, LossFamilies, FamilyNames);

TYPED_TEST(LossCuda, MatchesTheCpuPathAtTp2) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu_at_tp2<TypeParam>(kGpu);
}

TYPED_TEST(LossCuda, MatchesTheCpuPathOnMisalignedViews) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu_on_misaligned_views<TypeParam>(kGpu);
}

TYPED_TEST(LossCuda, HostAndDeviceInputsGiveTheSameResult) {
  SKIP_WITHOUT_GPU();
  expect_host_and_device_inputs_give_the_same_result<TypeParam>(kGpu);
}

TYPED_TEST(LossCuda, AccumulateIntoAnF32BufferForBf16Logits) {
  SKIP_WITHOUT_GPU();
  expect_cuda_accumulates_into_an_f32_buffer_for_bf16_logits<TypeParam>(kGpu);
}

TYPED_TEST(LossCuda, AllMaskedGivesExactZeros) {
  SKIP_WITHOUT_GPU();
  expect_all_masked_gives_exact_zeros<TypeParam>(37, {DType::F32, DType::BF16}, kGpu);
}

// ---- one family's own --------------------------------------------------------------------------------------------

TEST(DistributionLossCuda, TeacherInAnotherDtype) {
  SKIP_WITHOUT_GPU();
  using F = DistributionLossFamily;
  const F::Case c = kd::mixed_dtypes_case();
  for (int tp : {1, 2}) {
    expect_matches_reference<F>(c, tp, DType::F32, DType::BF16, kGpu, "cuda vs f64 reference");
    expect_matches_reference<F>(c, tp, DType::BF16, DType::F32, kGpu, "cuda vs f64 reference");
  }
}

TEST(CrossEntropyCuda, BadTargetsAreInputErrors) {
  SKIP_WITHOUT_GPU();
  const Tensor logits = Tensor::zeros({4, 10}, DType::F32, kGpu);
  const std::string on_device = retort::testing::message_of([&] {
    losses::cross_entropy(logits, Tensor::from_ints({1, 2, 10, 3}, {4}, kGpu));
  });
  EXPECT_NE(on_device.find("target 10 at row 2 is outside the vocabulary of 10"), std::string::npos) << on_device;
  const std::string on_host = retort::testing::message_of([&] {
    losses::cross_entropy(logits, Tensor::from_ints({1, -7, 1, 3}, {4}));
  });
  EXPECT_NE(on_host.find("target -7 at row 1"), std::string::npos) << on_host;
  // The device record was cleared: a good call afterwards succeeds.
  EXPECT_NO_THROW(losses::cross_entropy(logits, Tensor::from_ints({1, 2, 9, 3}, {4}, kGpu)));
}

TEST(TopkDistillationCuda, BackwardInPlaceOverTheLogits) {
  SKIP_WITHOUT_GPU();
  topk::Case c;
  c.name = "gpu_in_place";
  c.vocab_local = 1031;
  c.k = 32;
  c.inf_logprobs = true;
  topk::expect_backward_in_place_over_the_logits(c, {DType::F32, DType::BF16}, kGpu);
}

TEST(TopkDistillationCuda, KAboveTheKernelLimitIsNamed) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 2049, vocab = 4096;
  std::vector<int32_t> ids(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(i);
  losses::TopkTargets t;
  t.indices = Tensor::from_ints(ids, {1, k});
  t.logprobs = Tensor::full({1, k}, -10.0, DType::F32);
  const std::string m = retort::testing::message_of([&] {
    losses::topk_distillation_loss(Tensor::zeros({1, vocab}, DType::F32, kGpu), t);
  });
  EXPECT_NE(m.find("the CUDA kernels take at most 2048"), std::string::npos) << m;
}

}  // namespace
}  // namespace retort::loss_testing
