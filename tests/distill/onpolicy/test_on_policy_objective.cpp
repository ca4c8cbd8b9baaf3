// The on-policy objective on a tiny student and teacher: after choose_batch() (the student's greedy or sampled
// continuations), the loss and the gradient wrt the student's logits against the float64 reference of
// on_policy_test_support.h (reverse, forward and mixed KL over the generated positions only, at a temperature); at
// tp 1, 2 and 4 each rank's LOCAL gradient against its slice of the dense float64 gradient; and on a GPU the same
// batch's loss and gradient against the CPU's.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "core/tensor/device.h"
#include "distill/objectives/on_policy_objective.h"
#include "parallel/comm/thread_ranks.h"
#include "tests/distill/onpolicy/on_policy_test_support.h"

namespace retort::distill {
namespace {

using namespace on_policy_testing;

constexpr int64_t kRows = 3, kSeq = 8;

OnPolicyOptions options_for(OnPolicyDivergence divergence) {
  OnPolicyOptions o;
  o.ratio = 1;
  o.prompt_tokens = 4;
  o.new_tokens = 7;
  o.sample_temperature = 1.0;
  o.top_p = 0.95;
  o.divergence = divergence;
  o.mix = 0.3;
  o.kd_temperature = 1.5;  // the temperature and the T^2 scaling are checked too
  o.seed = 9;
  return o;
}

struct Models {
  GptModel student, teacher;
  explicit Models(std::shared_ptr<Communicator> tp = nullptr) : student(tiny_config(), tp), teacher(tiny_config(), tp) {
    student.initialize(11);
    teacher.initialize(23);
  }
};

std::vector<double> dense_logits(const GptModel& model, const data::TokenBatch& batch) {
  NoGradGuard no_grad;
  return model.forward(Tensor::from_ints(batch.inputs, {batch.batch, batch.seq})).to_doubles();
}

TEST(OnPolicyObjective, LossAndGradientMatchTheFloat64Reference) {
  Models m;
  for (OnPolicyDivergence divergence :
       {OnPolicyDivergence::Reverse, OnPolicyDivergence::Forward, OnPolicyDivergence::Mixed}) {
    const OnPolicyOptions o = options_for(divergence);
    OnPolicyDistillationObjective objective;
    objective.prepare_with(o, m.teacher, DType::F32, nullptr);
    data::TokenBatch batch = random_batch(kRows, kSeq, 5);
    objective.choose_batch(3, m.student, DType::F32, batch);
    ASSERT_EQ(batch.seq, o.prompt_tokens + o.new_tokens - 1);
    // The student's logits of the rollout as a leaf of the tape (f32, as in training).
    const std::vector<double> student = dense_logits(m.student, batch);
    Tensor logits = Tensor::from_doubles(student, {batch.batch, batch.seq, kVocab}, DType::F32);
    logits.set_requires_grad(true);
    const ObjectiveLoss loss = objective.micro_batch_loss(logits, batch);
    loss.loss.backward();
    EXPECT_EQ(objective.batch_kind(), "on_policy");

    const Reference want = reference_loss(student, dense_logits(m.teacher, batch), batch.targets, o);
    const std::string name = divergence_name(divergence);
    EXPECT_NEAR(loss.loss.item(), want.loss, 1e-5 * want.loss) << name;
    EXPECT_GT(want.loss, 0.05) << name << ": two different models must disagree";
    EXPECT_DOUBLE_EQ(loss.metrics.at("kd"), loss.loss.item());
    EXPECT_DOUBLE_EQ(loss.metrics.at("on_policy_" + name), loss.loss.item());
    const std::vector<double> grad = logits.grad().to_doubles();
    ASSERT_EQ(grad.size(), want.grad.size());
    int64_t zero_rows = 0;
    for (size_t i = 0; i < grad.size(); ++i) ASSERT_NEAR(grad[i], want.grad[i], 1e-6) << name << " entry " << i;
    for (int32_t t : batch.targets) zero_rows += t == o.ignore_index;
    EXPECT_EQ(zero_rows, kRows * (o.prompt_tokens - 1)) << "the prompt's positions but its last are not scored";
  }
}

TEST(OnPolicyObjective, EveryTpRankHoldsItsSliceOfTheDenseGradient) {
  const OnPolicyOptions o = options_for(OnPolicyDivergence::Mixed);
  // The batch of the dense student, and the dense reference over it.
  Models dense;
  data::TokenBatch batch = random_batch(kRows, kSeq, 5);
  {
    OnPolicyDistillationObjective objective;
    objective.prepare_with(o, dense.teacher, DType::F32, nullptr);
    objective.choose_batch(0, dense.student, DType::F32, batch);
  }
  const std::vector<double> student = dense_logits(dense.student, batch);
  const Reference want = reference_loss(student, dense_logits(dense.teacher, batch), batch.targets, o);
  const int64_t rows = batch.batch * batch.seq;
  for (int tp : {1, 2, 4}) {
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      Models local(comm);
      OnPolicyDistillationObjective objective;
      objective.prepare_with(o, local.teacher, DType::F32, comm);
      // The rollout of the split student is the dense one (the sampler's draws do not depend on the split).
      data::TokenBatch mine = random_batch(kRows, kSeq, 5);
      objective.choose_batch(0, local.student, DType::F32, mine);
      ASSERT_EQ(mine.inputs, batch.inputs) << "tp " << tp;
      ASSERT_EQ(mine.targets, batch.targets) << "tp " << tp;
      const int64_t width = kVocab / tp, first = comm->rank() * width;
      std::vector<double> slice;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) slice.push_back(student[static_cast<size_t>(r * kVocab + first + j)]);
      Tensor logits = Tensor::from_doubles(slice, {batch.batch, batch.seq, width}, DType::F64);
      logits.set_sharding({2, 1, comm});
      logits.set_requires_grad(true);
      const ObjectiveLoss loss = objective.micro_batch_loss(logits, mine);
      loss.loss.backward();
      EXPECT_NEAR(loss.loss.item(), want.loss, 1e-5 * want.loss) << "tp " << tp << " rank " << comm->rank();
      const std::vector<double> grad = logits.grad().to_doubles();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j)
          ASSERT_NEAR(grad[static_cast<size_t>(r * width + j)], want.grad[static_cast<size_t>(r * kVocab + first + j)],
                      1e-6)
              << "tp " << tp << " rank " << comm->rank() << " row " << r << " column " << first + j;
    });
  }
}

TEST(OnPolicyObjective, CudaLossAndGradientFollowTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (OnPolicyDivergence divergence :
       {OnPolicyDivergence::Reverse, OnPolicyDivergence::Forward, OnPolicyDivergence::Mixed}) {
    const OnPolicyOptions o = options_for(divergence);
    Models cpu, gpu;
    gpu.student.to(Device::cuda(0));
    gpu.teacher.to(Device::cuda(0));
    OnPolicyDistillationObjective on_cpu, on_gpu;
    on_cpu.prepare_with(o, cpu.teacher, DType::F32, nullptr);
    on_gpu.prepare_with(o, gpu.teacher, DType::F32, nullptr);
    data::TokenBatch batch = random_batch(kRows, kSeq, 5), gpu_batch = batch;
    on_cpu.choose_batch(2, cpu.student, DType::F32, batch);
    // The GPU's own rollout runs (its continuations may differ where two tokens are nearly tied), then both score
    // the CPU's batch, so the numbers compare.
    on_gpu.choose_batch(2, gpu.student, DType::F32, gpu_batch);
    EXPECT_EQ(gpu_batch.seq, batch.seq);
    std::vector<double> values[2], grads[2];
    for (int g = 0; g < 2; ++g) {
      GptModel& student = g ? gpu.student : cpu.student;
      Tensor logits = student.forward(
          Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, g ? Device::cuda(0) : Device::cpu()));
      logits = logits.detach();
      logits.set_requires_grad(true);
      const ObjectiveLoss loss = (g ? on_gpu : on_cpu).micro_batch_loss(logits, batch);
      loss.loss.backward();
      values[g] = {loss.loss.item()};
      grads[g] = logits.grad().to_doubles();
    }
    const std::string name = divergence_name(divergence);
    EXPECT_NEAR(values[1][0], values[0][0], 1e-4 * values[0][0]) << name;
    for (size_t i = 0; i < grads[0].size(); ++i) ASSERT_NEAR(grads[1][i], grads[0][i], 1e-5) << name << " " << i;
  }
}

}  // namespace
}  // namespace retort::distill
