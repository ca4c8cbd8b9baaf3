// The fused CUDA kernels against the float64 dense reference on every edge case, at tp 1, 2 and 4 as thread
// ranks sharing one GPU (collectives staged through Gloo), and at tp 2 over NCCL on two GPUs; against the CPU
// path on misaligned views; the accumulate path; device-side target checks. Skipped without a GPU.
#include <gtest/gtest.h>

#include "ce_test_support.h"
#include "core/tensor/device.h"
#include "tests/test_support.h"

namespace retort::ce_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

class CrossEntropyReferenceCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyReferenceCuda, EveryRankMatchesTheDenseReference) {
  SKIP_WITHOUT_GPU();
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, kGpu, "cuda vs f64 reference");
}

TEST_P(CrossEntropyReferenceCuda, TwoGpusOverNccl) {
  SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (DType dtype : {DType::F32, DType::BF16})
    expect_matches_reference(GetParam(), 2, dtype, kGpu, "cuda nccl vs f64 reference", {.nccl = true});
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyReferenceCuda, ::testing::ValuesIn(reference_cases()), case_name);

// Rows [1, rows + 1) of a [rows + 1, V] tensor: with an odd V the data does not start on a 16-byte boundary, so
// the kernels take their scalar head and tail paths; a vocabulary of 32771 takes the looped (multi-pack) path.
TEST(CrossEntropyCuda, MatchesTheCpuPathOnMisalignedViews) {
  SKIP_WITHOUT_GPU();
  for (int64_t vocab : {37, 1031, 32771}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("V " + std::to_string(vocab) + " " + std::string(dtype_name(dtype)));
      Case c;
      c.name = "misaligned";
      c.rows = 17;
      c.vocab_local = vocab;
      c.options.label_smoothing = 0.1;
      c.options.z_loss = 1e-4;
      const Problem p = make_problem(c, 1);
      std::vector<double> padded(static_cast<size_t>(vocab), 0.25);
      padded.insert(padded.end(), p.logits.begin(), p.logits.end());
      const Tensor host = Tensor::from_doubles(padded, {p.rows + 1, vocab}, dtype).rows(1, p.rows);
      Tensor cpu = host.clone().set_requires_grad();
      Tensor gpu = Tensor::from_doubles(padded, {p.rows + 1, vocab}, dtype, kGpu).rows(1, p.rows);
      gpu.set_requires_grad();
      const Tensor targets = Tensor::from_ints(p.targets, {p.rows});
      Tensor cpu_loss = losses::cross_entropy(cpu, targets, c.options);
      Tensor gpu_loss = losses::cross_entropy(gpu, targets.to(kGpu), c.options);
      const double le = loss_error(gpu_loss.item(), cpu_loss.item());
      EXPECT_LE(le, 4e-6);
      cpu_loss.backward();
      gpu_loss.backward();
      const double ge = scaled_error(gpu.grad().to_doubles(), cpu.grad().to_doubles());
      EXPECT_LE(ge, dtype == DType::BF16 ? 8e-3 : 1e-5);  // bf16: both sides round the gradient once
      ErrorLog::get().note("cuda vs cpu " + std::string(dtype_name(dtype)), le, ge);
    }
  }
}

TEST(CrossEntropyCuda, HostAndDeviceTargetsGiveTheSameResult) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "targets_where";
  c.options.label_smoothing = 0.1;
  const Problem p = make_problem(c, 2);
  const auto on_device = run_tp(c, p, 2, DType::F32, kGpu);
  const auto on_host = run_tp(c, p, 2, DType::F32, kGpu, {.device_targets = false});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(on_device[r].loss, on_host[r].loss);
    EXPECT_EQ(on_device[r].grad, on_host[r].grad);
  }
}

TEST(CrossEntropyCuda, AccumulateIntoAnF32BufferForBf16Logits) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "gpu_accumulate";
  c.vocab_local = 1031;
  c.options.label_smoothing = 0.1;
  c.options.z_loss = 1e-3;
  const Problem p = make_problem(c, 1);
  const Tensor logits = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::BF16, kGpu);
  const auto forward = losses::cross_entropy_forward(logits, Tensor::from_ints(p.targets, {p.rows}, kGpu), c.options);
  Tensor buffer = Tensor::full(logits.shape(), 0.5, DType::F32, kGpu);
  const Tensor two = Tensor::scalar(2.0, DType::F32, kGpu);
  losses::cross_entropy_backward(logits, forward.saved, two, buffer, true);
  losses::cross_entropy_backward(logits, forward.saved, two, buffer, true);
  const Reference ref = dense_reference(p, stored(p.logits, DType::BF16), c.options);
  const auto got = buffer.to_doubles();
  double worst = 0, scale = 0;
  for (double g : ref.grad) scale = std::max(scale, std::abs(g));
  for (int64_t i = 0; i < p.rows; ++i) {
    for (int64_t j = 0; j < p.vocab; ++j) {
      const size_t k = static_cast<size_t>(i * p.vocab + j);
      if (p.targets[i] == c.options.ignore_index) {
        ASSERT_EQ(got[k], 0.5) << "ignored row " << i << " was written";
      } else {
        worst = std::max(worst, std::abs(got[k] - 0.5 - 4 * ref.grad[k]) / (4 * scale));
      }
    }
  }
  EXPECT_LE(worst, 1e-5);
  ErrorLog::get().note("cuda bf16 logits, f32 grad", 0, worst);
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

TEST(CrossEntropyCuda, AllIgnoredGivesExactZeros) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor logits = Tensor::full({3, 37}, 1.5, dtype, kGpu).set_requires_grad();
    CrossEntropyOptions o;
    o.label_smoothing = 0.1;
    o.z_loss = 1e-2;
    Tensor loss = losses::cross_entropy(logits, Tensor::from_ints({-100, -100, -100}, {3}, kGpu), o);
    EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    for (double g : logits.grad().to_doubles()) ASSERT_EQ(g, 0.0);
  }
}

}  // namespace
}  // namespace retort::ce_testing
