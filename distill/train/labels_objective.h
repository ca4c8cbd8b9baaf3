#pragma once
// The run without a teacher: the cross-entropy of the batch's labels, with the loss.* keys' label smoothing and
// z-loss (losses/cross_entropy.h, vocab-parallel under tensor parallelism).
#include "distill/train/objective.h"
#include "losses/cross_entropy.h"

namespace retort::distill {

// loss.ignore_index, loss.label_smoothing, loss.smoothing_convention and loss.z_loss.
losses::CrossEntropyOptions cross_entropy_options_from(const ResolvedConfig& config);

class LabelsObjective final : public TrainingObjective {
 public:
  std::string progress_label() const override { return "train"; }
  void prepare(const RunContext& run) override;
  // The loss, and as "ce" the plain cross-entropy of the labels (the loss itself without smoothing and z-loss), the
  // key a distilled student reports too.
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  nlohmann::json description() const override;
  // Without label smoothing and z-loss the loss is the plain cross-entropy reported as "ce".
  std::shared_ptr<const GraphableLoss> graphable_loss() const override;

 private:
  losses::CrossEntropyOptions options_;
};

}  // namespace retort::distill
