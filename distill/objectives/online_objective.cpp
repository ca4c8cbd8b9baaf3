#include "distill/objectives/online_objective.h"

#include <spdlog/spdlog.h>

#include "core/ops/ops.h"
#include "distill/distill_config.h"
#include "distill/train/plain_cross_entropy.h"
#include "losses/cross_entropy.h"

namespace retort::distill {

void OnlineDistillationObjective::prepare(const RunContext& run) {
  const ResolvedConfig& config = *run.config;
  teacher_ = std::make_unique<TrainedModel>(load_trained_model(teacher_run_dir(config), run.device, run.tp_group));
  check_same_tokenizer(*teacher_, run.dataset->tokenizer_fingerprint, run.dataset->vocab_size, "teacher");
  spdlog::info("distill: online teacher {} (step {})", teacher_->checkpoint.string(), teacher_->step);
  options_.divergence = losses::Divergence::ForwardKL;
  options_.temperature = config.get_double("distill.temperature");
  options_.ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
  options_.group = run.tp_group;
  kd_ratio_ = config.get_double("distill.kd_ratio");
  device_ = run.device;
}

ObjectiveLoss OnlineDistillationObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  const Tensor tokens = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device_);
  const Tensor labels = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device_);
  const Tensor teacher_logits = inference_logits(*teacher_, tokens);
  Tensor kd = losses::distribution_loss(logits, teacher_logits, labels, options_);
  const double kd_value = kd.item();
  if (kd_ratio_ >= 1) {
    return ObjectiveLoss{kd, {{"ce", plain_cross_entropy(logits, labels, options_.ignore_index)}, {"kd", kd_value}}};
  }
  // The labels' cross-entropy is both a term of the loss and the reported metric: computed once.
  losses::CrossEntropyOptions plain;
  plain.ignore_index = options_.ignore_index;
  const Tensor ce = losses::cross_entropy(logits, labels, plain);
  const double ce_value = ce.item();
  Tensor loss = ops::add(ops::scale(kd, kd_ratio_), ops::scale(ce, 1 - kd_ratio_));
  return ObjectiveLoss{loss, {{"ce", ce_value}, {"kd", kd_value}}};
}

}  // namespace retort::distill
