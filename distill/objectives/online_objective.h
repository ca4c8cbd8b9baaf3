#pragma once
// A student learning from a teacher that runs in the same step (distill.mode = online): the teacher's full
// next-token distribution over the student's batch, the forward KL at distill.temperature
// (losses/distribution_loss.h), mixed with the labels' CE by distill.kd_ratio. No cache is read or written.
#include <memory>

#include "distill/train/objective.h"
#include "distill/train/trained_model.h"
#include "losses/distribution_loss.h"

namespace retort::distill {

class OnlineDistillationObjective final : public TrainingObjective {
 public:
  std::string progress_label() const override { return "distill"; }
  // Loads distill.teacher split like the student and checks that it uses the student's tokenizer.
  void prepare(const RunContext& run) override;
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  nlohmann::json description() const override {
    return {{"name", "online"},
            {"divergence", "forward_kl"},
            {"temperature", options_.temperature},
            {"kd_ratio", kd_ratio_}};
  }
  const TrainedModel* validation_teacher() const override { return teacher_.get(); }

 private:
  std::unique_ptr<TrainedModel> teacher_;
  losses::DistributionLossOptions options_;
  double kd_ratio_ = 1.0;
  Device device_;
};

}  // namespace retort::distill
