#pragma once
// Steps that alternate between off-policy and on-policy distillation (0 < distill.on_policy_ratio < 1): the step
// counter picks the kind (is_on_policy_step), an off-policy step is the objective of distill.mode on the data's
// batch as it is, an on-policy step the student's continuations scored by the teacher. One teacher in memory serves
// both when the off-policy objective holds one (online mode, or the cache mode's validation teacher).
#include <memory>

#include "distill/objectives/on_policy_objective.h"
#include "distill/train/objective.h"

namespace retort::distill {

class InterleavedPolicyObjective final : public TrainingObjective {
 public:
  InterleavedPolicyObjective(std::unique_ptr<TrainingObjective> off_policy, double on_policy_ratio);

  std::string progress_label() const override { return "distill"; }
  void prepare(const RunContext& run) override;
  void choose_batch(int64_t step, const GptModel& student, DType compute_dtype, data::TokenBatch& batch) override;
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  // {"name": "interleaved", "on_policy_ratio", "off_policy": its description, "on_policy": its description}
  nlohmann::json description() const override;
  std::string batch_kind() const override { return on_policy_now_ ? "on_policy" : "off_policy"; }
  const TrainedModel* validation_teacher() const override;
  std::map<std::string, double> validation_metrics(const GptModel& student, DType compute_dtype) override;

 private:
  std::unique_ptr<TrainingObjective> off_policy_;
  OnPolicyDistillationObjective on_policy_;
  double ratio_;
  bool on_policy_now_ = false;  // the kind choose_batch() picked for the micro-batch at hand
};

}  // namespace retort::distill
