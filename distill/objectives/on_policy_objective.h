#pragma once
// On-policy distillation (distill.on_policy_ratio): the student trains on its own continuations of prompts from the
// data (distill/onpolicy/student_rollout.h), the teacher (in memory, the student's tokenizer) scores every position
// of them in its forward, and the student minimises distill.on_policy_divergence (reverse KL by default) between
// its and the teacher's full next-token distributions at the positions that predict its own tokens. The student
// learns where its own samples take it, not only on the data's prefixes (Agarwal et al. 2024, "On-Policy
// Distillation of Language Models"; Gu et al. 2024, MiniLLM). No cache is read and the data's labels are not
// used: the loss is the divergence alone (distill.kd_ratio applies to off-policy steps).
#include <memory>
#include <optional>
#include <vector>

#include "distill/onpolicy/on_policy_options.h"
#include "distill/train/objective.h"
#include "distill/train/trained_model.h"

namespace retort::distill {

class OnPolicyDistillationObjective final : public TrainingObjective {
 public:
  std::string progress_label() const override { return "distill"; }
  // Reads distill.on_policy_*, loads distill.teacher split like the student (unless use_teacher() gave one) and
  // checks that it uses the student's tokenizer; keeps a few validation batches' prompts for validation_metrics().
  void prepare(const RunContext& run) override;
  // A teacher already in memory (the off-policy objective's, when steps alternate), used instead of loading one.
  void use_teacher(const TrainedModel* teacher) { shared_teacher_ = teacher; }
  // Without a run: the options, the teacher (split over tp_group like the student) and its compute dtype.
  void prepare_with(const OnPolicyOptions& options, const GptModel& teacher, DType teacher_dtype,
                    std::shared_ptr<Communicator> tp_group);

  // Replaces the data's batch with the student's continuations of its prompts (the draws' seed follows the step).
  void choose_batch(int64_t step, const GptModel& student, DType compute_dtype, data::TokenBatch& batch) override;
  // logits of a batch choose_batch() made: the teacher's forward over the same tokens, then the divergence.
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  nlohmann::json description() const override;
  std::string batch_kind() const override { return "on_policy"; }
  const TrainedModel* validation_teacher() const override { return teacher_run_; }
  // eval_on_policy_reverse_kl and eval_on_policy_forward_kl (held_out_divergence.h) on the kept prompts.
  std::map<std::string, double> validation_metrics(const GptModel& student, DType compute_dtype) override;

 private:
  OnPolicyOptions options_;
  std::unique_ptr<TrainedModel> own_teacher_;
  const TrainedModel* shared_teacher_ = nullptr;
  const TrainedModel* teacher_run_ = nullptr;  // the teacher's run, when it came from one
  const GptModel* teacher_ = nullptr;
  DType teacher_dtype_ = DType::F32;
  std::shared_ptr<Communicator> tp_group_;
  std::vector<data::TokenBatch> validation_prompts_;
};

}  // namespace retort::distill
