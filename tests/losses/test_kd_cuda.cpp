// The fused CUDA distribution-loss kernels against the float64 dense reference on every edge case, at tp 1, 2
// and 4 as thread ranks sharing one GPU (collectives staged through Gloo), and at tp 2 over NCCL on two GPUs;
// against the CPU path on misaligned views and mixed dtypes; the accumulate path; host and device labels.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "kd_test_support.h"

namespace retort::kd_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

class DistributionLossReferenceCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DistributionLossReferenceCuda, EveryRankMatchesTheDenseReference) {
  SKIP_WITHOUT_GPU();
  for (int tp : {1, 2, 4})
    for (DType dtype : {DType::F32, DType::BF16})
      expect_matches_reference(GetParam(), tp, dtype, dtype, kGpu, "cuda vs f64 reference");
}

TEST_P(DistributionLossReferenceCuda, TwoGpusOverNccl) {
  SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (DType dtype : {DType::F32, DType::BF16})
    expect_matches_reference(GetParam(), 2, dtype, dtype, kGpu, "cuda nccl vs f64 reference", {.nccl = true});
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributionLossReferenceCuda, ::testing::ValuesIn(reference_cases()), case_name);

TEST(DistributionLossCuda, TeacherInAnotherDtype) {
  SKIP_WITHOUT_GPU();
  const Case c = mixed_dtypes_case();
  for (int tp : {1, 2}) {
    expect_matches_reference(c, tp, DType::F32, DType::BF16, kGpu, "cuda vs f64 reference");
    expect_matches_reference(c, tp, DType::BF16, DType::F32, kGpu, "cuda vs f64 reference");
  }
}

// Rows [1, rows + 1) of a [rows + 1, V] tensor: with an odd V the data does not start on a 16-byte boundary, so
// the kernels take their scalar head and tail paths (and, with the teacher aligned differently or stored in
// another dtype, the scalar path throughout); a vocabulary of 32771 takes the looped (multi-pack) path.
TEST(DistributionLossCuda, MatchesTheCpuPathOnMisalignedViews) {
  SKIP_WITHOUT_GPU();
  for (int64_t vocab : {37, 1031, 32771}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (DType teacher_dtype : {dtype, DType::F32}) {
        for (bool same_offset : {true, false}) {
          for (Divergence d : all_divergences()) {
            SCOPED_TRACE("V " + std::to_string(vocab) + " " + std::string(dtype_name(dtype)) + " teacher " +
                         std::string(dtype_name(teacher_dtype)) + (same_offset ? "" : " offset") + " " +
                         divergence_name(d));
            Case c;
            c.name = "misaligned";
            c.rows = 17;
            c.vocab_local = vocab;
            c.inf_entries = true;
            const Problem p = make_problem(c, 1, d);
            // `offset` leading rows of padding: an odd V puts the data off a 16-byte boundary
            auto view = [&](const std::vector<double>& values, DType type, Device device, int64_t offset) {
              std::vector<double> padded(static_cast<size_t>(offset * vocab), 0.25);
              padded.insert(padded.end(), values.begin(), values.end());
              return Tensor::from_doubles(padded, {p.rows + offset, vocab}, type, device).rows(offset, p.rows);
            };
            const int64_t teacher_offset = same_offset ? 1 : 2;
            const Tensor labels = Tensor::from_ints(p.labels, {p.rows});
            DistributionLossOptions o;
            o.divergence = d;
            o.temperature = 2.5;
            Tensor cpu = view(p.student, dtype, Device::cpu(), 1).clone().set_requires_grad();
            Tensor gpu = view(p.student, dtype, kGpu, 1);
            gpu.set_requires_grad();
            const Tensor cpu_teacher = view(p.teacher, teacher_dtype, Device::cpu(), teacher_offset).clone();
            const Tensor gpu_teacher = view(p.teacher, teacher_dtype, kGpu, teacher_offset);
            Tensor cpu_loss = losses::distribution_loss(cpu, cpu_teacher, labels, o);
            Tensor gpu_loss = losses::distribution_loss(gpu, gpu_teacher, labels.to(kGpu), o);
            const double le = loss_error(gpu_loss.item(), cpu_loss.item());
            EXPECT_LE(le, 4e-6);
            cpu_loss.backward();
            gpu_loss.backward();
            const Reference ref = reference_for(c, p, o, dtype, teacher_dtype);
            const double ge = grad_error(gpu.grad().to_doubles(), cpu.grad().to_doubles(), ref.grad_unit);
            EXPECT_LE(ge, dtype == DType::BF16 ? 8e-3 : 1e-5);  // bf16: both sides round the gradient once
            ErrorLog::get().note("cuda vs cpu " + divergence_name(d) + " " + std::string(dtype_name(dtype)), le, ge);
          }
        }
      }
    }
  }
}

// The same problems through both backends at tp 2, the edge cases with -inf and logits x1000 included.
TEST(DistributionLossCuda, MatchesTheCpuPathAtTp2) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : reference_cases()) {
    SCOPED_TRACE(c.name);
    const CaseJobs cj = jobs_for(c, 2);
    for (DType dtype : {DType::F32, DType::BF16}) {
      const auto cpu = run_tp(c, cj.jobs, 2, dtype, dtype, Device::cpu());
      const auto gpu = run_tp(c, cj.jobs, 2, dtype, dtype, kGpu);
      const Tolerance tol = tolerance_for(dtype, c, kGpu);
      for (size_t k = 0; k < cj.jobs.size(); ++k) {
        SCOPED_TRACE(job_label(cj.jobs[k]));
        const Reference ref = reference_for(c, *cj.jobs[k].problem, cj.jobs[k].options, dtype, dtype);
        for (int r = 0; r < 2; ++r) {
          const double le = loss_error(gpu[k][r].loss, cpu[k][r].loss);
          const double ge = grad_error(gpu[k][r].grad, cpu[k][r].grad, ref.grad_unit);
          EXPECT_LE(le, tol.loss) << "rank " << r;
          EXPECT_LE(ge, dtype == DType::BF16 ? 2 * tol.grad : tol.grad) << "rank " << r;
          ErrorLog::get().note("cuda vs cpu tp 2 " + divergence_name(cj.jobs[k].options.divergence) + " " +
                                   std::string(dtype_name(dtype)) + (c.scale >= 1000 ? " x1000" : ""),
                               le, ge);
        }
      }
    }
  }
}

TEST(DistributionLossCuda, HostAndDeviceLabelsGiveTheSameResult) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "labels_where";
  c.temperatures = {2.0};
  c.t_squared = {true};
  const CaseJobs cj = jobs_for(c, 2);
  const auto on_device = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, kGpu);
  const auto on_host = run_tp(c, cj.jobs, 2, DType::F32, DType::F32, kGpu, {.device_labels = false});
  for (size_t k = 0; k < cj.jobs.size(); ++k)
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(on_device[k][r].loss, on_host[k][r].loss);
      EXPECT_EQ(on_device[k][r].grad, on_host[k][r].grad);
    }
}

TEST(DistributionLossCuda, AccumulateIntoAnF32BufferForBf16Logits) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.name = "gpu_accumulate";
  c.vocab_local = 1031;
  c.inf_entries = true;
  for (Divergence d : all_divergences()) {
    const Problem p = make_problem(c, 1, d);
    DistributionLossOptions o;
    o.divergence = d;
    o.temperature = 2.0;
    const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::BF16, kGpu);
    const Tensor teacher = Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::BF16, kGpu);
    const auto forward =
        losses::distribution_loss_forward(student, teacher, Tensor::from_ints(p.labels, {p.rows}, kGpu), o);
    Tensor buffer = Tensor::full(student.shape(), 0.5, DType::F32, kGpu);
    const Tensor two = Tensor::scalar(2.0, DType::F32, kGpu);
    losses::distribution_loss_backward(student, teacher, forward.saved, two, buffer, true);
    losses::distribution_loss_backward(student, teacher, forward.saved, two, buffer, true);
    const Reference ref = reference_for(c, p, o, DType::BF16, DType::BF16);
    const double worst = loss_testing::accumulated_error(buffer.to_doubles(), ref.grad, ref.grad_unit, valid_rows(c, p),
                                                         p.rows, p.vocab);
    EXPECT_LE(worst, 1e-5) << divergence_name(d);
    ErrorLog::get().note("cuda bf16 logits, f32 grad " + divergence_name(d), 0, worst);
  }
}

TEST(DistributionLossCuda, AllMaskedGivesExactZeros) {
  SKIP_WITHOUT_GPU();
  for (Divergence d : all_divergences()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Tensor student = Tensor::full({3, 37}, 1.5, dtype, kGpu).set_requires_grad();
      const Tensor teacher = Tensor::full({3, 37}, -0.5, dtype, kGpu);
      DistributionLossOptions o;
      o.divergence = d;
      Tensor loss = losses::distribution_loss(student, teacher, Tensor::from_ints({-100, -100, -100}, {3}, kGpu), o);
      EXPECT_EQ(loss.item(), 0.0);
      loss.backward();
      for (double g : student.grad().to_doubles()) ASSERT_EQ(g, 0.0);
    }
  }
}

}  // namespace
}  // namespace retort::kd_testing
