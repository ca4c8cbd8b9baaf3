#include "distill/onpolicy/held_out_divergence.h"

#include "core/autograd/grad_mode.h"
#include "distill/onpolicy/student_rollout.h"
#include "losses/distribution_loss.h"

namespace retort::distill {

HeldOutDivergence held_out_divergence(const GptModel& student, DType student_dtype, const GptModel& teacher,
                                      DType teacher_dtype, const std::vector<data::TokenBatch>& prompts,
                                      const OnPolicyOptions& options) {
  NoGradGuard no_grad;
  const Device device = student.named_parameters().front().second.device();
  RolloutOptions rollout_options;
  rollout_options.prompt_tokens = options.prompt_tokens;
  rollout_options.new_tokens = options.new_tokens;
  rollout_options.sampling.temperature = options.sample_temperature;
  rollout_options.sampling.top_p = options.top_p;
  rollout_options.sampling.seed = options.seed;
  rollout_options.compute_dtype = student_dtype;
  losses::DistributionLossOptions loss;
  loss.temperature = 1.0;
  loss.scale_by_t_squared = false;
  loss.ignore_index = options.ignore_index;
  loss.reduction = losses::Reduction::Sum;
  HeldOutDivergence out;
  for (const data::TokenBatch& data : prompts) {
    const StudentRollout rollout = roll_out_student(student, data, rollout_options);
    const data::TokenBatch batch = rollout_training_batch(rollout, data, options.ignore_index);
    const Tensor inputs = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
    const Tensor targets = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
    const Tensor q = student.forward(inputs, student_dtype), p = teacher.forward(inputs, teacher_dtype);
    loss.divergence = losses::Divergence::ReverseKL;
    out.reverse_kl += losses::distribution_loss_forward(q, p, targets, loss).loss.item();
    loss.divergence = losses::Divergence::ForwardKL;
    out.forward_kl += losses::distribution_loss_forward(q, p, targets, loss).loss.item();
    out.tokens += batch.batch * options.new_tokens;
  }
  if (out.tokens > 0) {
    out.reverse_kl /= static_cast<double>(out.tokens);
    out.forward_kl /= static_cast<double>(out.tokens);
  }
  return out;
}

}  // namespace retort::distill
