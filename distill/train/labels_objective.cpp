#include "distill/train/labels_objective.h"

#include "distill/train/plain_cross_entropy.h"

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
  Tensor loss = losses::cross_entropy(logits, targets, options_);
  const bool plain = options_.label_smoothing == 0 && options_.z_loss == 0;
  const double ce =
      plain ? loss.item() : plain_cross_entropy(logits, targets.to(logits.device()), options_.ignore_index);
  return ObjectiveLoss{loss, {{"ce", ce}}};
}

std::shared_ptr<const GraphableLoss> LabelsObjective::graphable_loss() const {
  if (options_.label_smoothing != 0 || options_.z_loss != 0) return nullptr;
  return graphable_cross_entropy(options_);
}

nlohmann::json LabelsObjective::description() const {
  nlohmann::json out{{"name", "labels"}, {"label_smoothing", options_.label_smoothing}, {"z_loss", options_.z_loss}};
  if (options_.label_smoothing > 0)
    out["smoothing_convention"] =
        options_.smoothing_convention == losses::LabelSmoothingConvention::PyTorch ? "pytorch" : "megatron";
  return out;
}

}  // namespace retort::distill
