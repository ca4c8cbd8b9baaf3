// The fused CUDA top-k distillation kernels against the float64 dense reference on every edge case, at tp 1, 2
// and 4 as thread ranks sharing one GPU (collectives staged through Gloo), and at tp 2 over NCCL on two GPUs;
// against the CPU path on misaligned views, large vocabularies and large k; the accumulate path; host and device
// targets. Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "tests/test_support.h"
#include "topk_kd_test_support.h"

namespace retort::topk_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

class TopkDistillationReferenceCuda : public ::testing::TestWithParam<Case> {};

TEST_P(TopkDistillationReferenceCuda, EveryRankMatchesTheDenseReference) {
  SKIP_WITHOUT_GPU();
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, kGpu, "topk cuda vs f64 reference");
}

TEST_P(TopkDistillationReferenceCuda, TwoGpusOverNccl) {
  SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (DType dtype : {DType::F32, DType::BF16})
    expect_matches_reference(GetParam(), 2, dtype, kGpu, "topk cuda nccl vs f64 reference", {.nccl = true});
}

INSTANTIATE_TEST_SUITE_P(Cases, TopkDistillationReferenceCuda, ::testing::ValuesIn(reference_cases()), case_name);

// The same problems through both backends at tp 2, the edge cases with -inf and logits x1000 included.
TEST(TopkDistillationCuda, MatchesTheCpuPathAtTp2) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : reference_cases()) {
    SCOPED_TRACE(c.name);
    const CaseJobs cj = jobs_for(c, 2);
    for (DType dtype : {DType::F32, DType::BF16}) {
      const auto cpu = run_tp(c, cj.jobs, 2, dtype, c.cache_dtype, Device::cpu());
      const auto gpu = run_tp(c, cj.jobs, 2, dtype, c.cache_dtype, kGpu);
      const Tolerance tol = tolerance_for(dtype, c, kGpu);
      for (size_t j = 0; j < cj.jobs.size(); ++j) {
        SCOPED_TRACE(job_label(cj.jobs[j]));
        const Reference ref = reference_for(c, *cj.jobs[j].problem, cj.jobs[j].options, dtype, c.cache_dtype);
        for (int r = 0; r < 2; ++r) {
          const double le = loss_error(gpu[j][r].loss, cpu[j][r].loss);
          const double ge = grad_error(gpu[j][r].grad, cpu[j][r].grad, ref.grad_unit);
          EXPECT_LE(le, tol.loss) << "rank " << r;
          EXPECT_LE(ge, dtype == DType::BF16 ? 2 * tol.grad : tol.grad) << "rank " << r;
          ErrorLog::get().note("topk cuda vs cpu tp 2 " + divergence_name(cj.jobs[j].options.divergence) + " " +
                                   std::string(dtype_name(dtype)) + (c.scale >= 1000 ? " x1000" : ""),
                               le, ge);
        }
      }
    }
  }
}

// Rows [1, rows + 1) of a [rows + 1, V] tensor: with an odd V the data does not start on a 16-byte boundary, so
// the kernels take their scalar head and tail paths; V 32771 takes the looped (multi-pack) path, k up to 1000
// many members of S per thread and a long rank sort.
TEST(TopkDistillationCuda, MatchesTheCpuPathOnMisalignedViewsLargeVocabAndLargeK) {
  SKIP_WITHOUT_GPU();
  struct Shape3 {
    int64_t vocab, k;
  };
  for (const Shape3 shape : {Shape3{37, 9}, Shape3{1031, 64}, Shape3{32771, 64}, Shape3{32771, 1000}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (TopkDivergence d : all_divergences()) {
        SCOPED_TRACE("V " + std::to_string(shape.vocab) + " k " + std::to_string(shape.k) + " " +
                     std::string(dtype_name(dtype)) + " " + divergence_name(d));
        Case c;
        c.name = "misaligned";
        c.rows = 9;
        c.vocab_local = shape.vocab;
        c.k = shape.k;
        c.inf_logprobs = true;
        c.inf_student_tail = true;
        const Problem p = make_problem(c, 1);
        auto view = [&](const std::vector<double>& values, DType type, Device device) {
          std::vector<double> padded(static_cast<size_t>(shape.vocab), 0.25);
          padded.insert(padded.end(), values.begin(), values.end());
          return Tensor::from_doubles(padded, {p.rows + 1, shape.vocab}, type, device).rows(1, p.rows);
        };
        TopkDistillationOptions o;
        o.divergence = d;
        o.kd_ratio = 0.8;
        o.forward_weight = 0.3;
        Tensor cpu = view(p.student, dtype, Device::cpu()).clone().set_requires_grad();
        Tensor gpu = view(p.student, dtype, kGpu);
        gpu.set_requires_grad();
        Tensor cpu_loss = losses::topk_distillation_loss(cpu, targets_of(c, p, {p.rows}, DType::F32, Device::cpu()), o);
        Tensor gpu_loss = losses::topk_distillation_loss(gpu, targets_of(c, p, {p.rows}, DType::F32, kGpu), o);
        const double le = loss_error(gpu_loss.item(), cpu_loss.item());
        EXPECT_LE(le, 4e-6);
        cpu_loss.backward();
        gpu_loss.backward();
        const Reference ref = reference_for(c, p, o, dtype, DType::F32);
        const double ge = grad_error(gpu.grad().to_doubles(), cpu.grad().to_doubles(), ref.grad_unit);
        EXPECT_LE(ge, dtype == DType::BF16 ? 8e-3 : 1e-5);  // bf16: both sides round the gradient once
        ErrorLog::get().note("topk cuda vs cpu V " + std::to_string(shape.vocab) + " k " + std::to_string(shape.k) +
                                 " " + divergence_name(d) + " " + std::string(dtype_name(dtype)),
                             le, ge);
      }
    }
  }
}

TEST(TopkDistillationCuda, HostAndDeviceTargetsGiveTheSameResult) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "targets_where";
  c.mask = true;
  c.with_temperature = false;
  const CaseJobs cj = jobs_for(c, 2);
  const auto on_device = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, kGpu);
  const auto on_host = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, kGpu, {.device_targets = false});
  for (size_t j = 0; j < cj.jobs.size(); ++j)
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(on_device[j][r].loss, on_host[j][r].loss);
      EXPECT_EQ(on_device[j][r].grad, on_host[j][r].grad);
    }
}

TEST(TopkDistillationCuda, AccumulateIntoAnF32BufferForBf16Logits) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "gpu_accumulate";
  c.vocab_local = 1031;
  c.k = 32;
  c.inf_logprobs = true;
  c.mask = true;
  const Problem p = make_problem(c, 1);
  const std::vector<bool> valid = valid_rows(c, p);
  for (TopkDivergence d : all_divergences()) {
    TopkDistillationOptions o;
    o.divergence = d;
    o.kd_ratio = 0.8;
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::BF16, kGpu);
    const auto forward = losses::topk_distillation_forward(student, targets_of(c, p, {p.rows}, DType::F32, kGpu), o);
    Tensor buffer = Tensor::full(student.shape(), 0.5, DType::F32, kGpu);
    const Tensor two = Tensor::scalar(2.0, DType::F32, kGpu);
    losses::topk_distillation_backward(student, forward.saved, two, buffer, true);
    losses::topk_distillation_backward(student, forward.saved, two, buffer, true);
    const Reference ref = reference_for(c, p, o, DType::BF16, DType::F32);
    const double worst =
        loss_testing::accumulated_error(buffer.to_doubles(), ref.grad, ref.grad_unit, valid, p.rows, p.vocab);
    EXPECT_LE(worst, 1e-5) << divergence_name(d);
    ErrorLog::get().note("topk cuda bf16 logits, f32 grad " + divergence_name(d), 0, worst);
  }
}

// The gradient may overwrite the logits themselves (each column is read before it is written).
TEST(TopkDistillationCuda, BackwardInPlaceOverTheLogits) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "gpu_in_place";
  c.vocab_local = 1031;
  c.k = 32;
  c.inf_logprobs = true;
  const Problem p = make_problem(c, 1);
  for (TopkDivergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      TopkDistillationOptions o;
      o.divergence = d;
      o.kd_ratio = 0.8;
      const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, dtype, kGpu);
      const auto forward = losses::topk_distillation_forward(student, targets_of(c, p, {p.rows}, DType::F32, kGpu), o);
      Tensor expected = Tensor::empty(student.shape(), dtype, kGpu);
      losses::topk_distillation_backward(student, forward.saved, Tensor(), expected);
      Tensor in_place = student.clone();
      losses::topk_distillation_backward(in_place, forward.saved, Tensor(), in_place);
      EXPECT_EQ(in_place.to_doubles(), expected.to_doubles()) << divergence_name(d) << " " << dtype_name(dtype);
    }
  }
}

TEST(TopkDistillationCuda, AllMaskedGivesExactZeros) {
  SKIP_WITHOUT_GPU();
  for (TopkDivergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Tensor student = Tensor::full({3, 37}, 1.5, dtype, kGpu).set_requires_grad();
      TopkTargets t;
      t.indices = Tensor::from_ints({0, 3, 1, 2, 36, 5}, {3, 2}, kGpu);
      t.logprobs = Tensor::full({3, 2}, -1.0, DType::F32, kGpu);
      t.labels = Tensor::from_ints({-100, 2, 4}, {3}, kGpu);
      t.mask = Tensor::from_ints({1, 0, 0}, {3}, kGpu);
      TopkDistillationOptions o;
      o.divergence = d;
      o.kd_ratio = 0.5;
      Tensor loss = losses::topk_distillation_loss(student, t, o);
      EXPECT_EQ(loss.item(), 0.0);
      loss.backward();
      for (double g : student.grad().to_doubles()) ASSERT_EQ(g, 0.0);
    }
  }
}

TEST(TopkDistillationCuda, KAboveTheKernelLimitIsNamed) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 2049, vocab = 4096;
  std::vector<int32_t> ids(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(i);
  TopkTargets t;
  t.indices = Tensor::from_ints(ids, {1, k});
  t.logprobs = Tensor::full({1, k}, -10.0, DType::F32);
  const std::string m = retort::testing::message_of([&] {
    losses::topk_distillation_loss(Tensor::zeros({1, vocab}, DType::F32, kGpu), t);
  });
  EXPECT_NE(m.find("the CUDA kernels take at most 2048"), std::string::npos) << m;
}

}  // namespace
}  // namespace retort::topk_testing
