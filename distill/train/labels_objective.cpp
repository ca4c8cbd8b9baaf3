#include "distill/train/labels_objective.h"

namespace retort::distill {

losses::CrossEntropyOptions cross_entropy_options_from(const ResolvedConfig& config) {
  losses::CrossEntropyOptions options;
  options.ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
  options.label_smoothing = config.get_double("loss.label_smoothing");
  options.smoothing_convention = config.get_string("loss.smoothing_convention") == "pytorch"
                                     ? losses::LabelSmoothingConvention::PyTorch
                                     : losses::LabelSmoothingConvention::Megatron;
  options.z_loss = config.get_double("loss.z_loss");
  return options;
}

void LabelsObjective::prepare(const RunContext& run) {
  options_ = cross_entropy_options_from(*run.config);
}

ObjectiveLoss LabelsObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  const Tensor targets = Tensor::from_ints(batch.targets, {batch.batch, batch.seq});
  return ObjectiveLoss{losses::cross_entropy(logits, targets, options_), {}};
}

}  // namespace retort::distill
