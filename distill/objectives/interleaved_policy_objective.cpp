#include "distill/objectives/interleaved_policy_objective.h"

#include "distill/onpolicy/on_policy_options.h"

namespace retort::distill {

InterleavedPolicyObjective::InterleavedPolicyObjective(std::unique_ptr<TrainingObjective> off_policy,
                                                       double on_policy_ratio)
    : off_policy_(std::move(off_policy)), ratio_(on_policy_ratio) {}

void InterleavedPolicyObjective::prepare(const RunContext& run) {
  off_policy_->prepare(run);
  // The off-policy objective's teacher (when it loaded one of the student's tokenizer) serves the on-policy steps.
  on_policy_.use_teacher(off_policy_->validation_teacher());
  on_policy_.prepare(run);
}

void InterleavedPolicyObjective::choose_batch(int64_t step, const GptModel& student, DType compute_dtype,
                                              data::TokenBatch& batch) {
  on_policy_now_ = is_on_policy_step(step, ratio_);
  if (on_policy_now_)
    on_policy_.choose_batch(step, student, compute_dtype, batch);
  else
    off_policy_->choose_batch(step, student, compute_dtype, batch);
}

ObjectiveLoss InterleavedPolicyObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  return on_policy_now_ ? on_policy_.micro_batch_loss(logits, batch) : off_policy_->micro_batch_loss(logits, batch);
}

nlohmann::json InterleavedPolicyObjective::description() const {
  return {{"name", "interleaved"},
          {"on_policy_ratio", ratio_},
          {"off_policy", off_policy_->description()},
          {"on_policy", on_policy_.description()}};
}

const TrainedModel* InterleavedPolicyObjective::validation_teacher() const {
  const TrainedModel* teacher = off_policy_->validation_teacher();
  return teacher ? teacher : on_policy_.validation_teacher();
}

std::map<std::string, double> InterleavedPolicyObjective::validation_metrics(const GptModel& student,
                                                                             DType compute_dtype) {
  std::map<std::string, double> metrics = off_policy_->validation_metrics(student, compute_dtype);
  metrics.merge(on_policy_.validation_metrics(student, compute_dtype));
  return metrics;
}

}  // namespace retort::distill
