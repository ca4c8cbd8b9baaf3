#pragma once
// A student learning from the teacher's top-k cache (distill.mode = cache): per position, the teacher's k most
// likely tokens and their log-probabilities (distill/cache/), turned into the batch's targets and given to the
// top-k distillation loss (losses/topk_distillation.h): kd_ratio x KD + (1 - kd_ratio) x the labels' CE.
#include <memory>
#include <optional>

#include "distill/cache/topk_cache.h"
#include "distill/train/objective.h"
#include "distill/train/trained_model.h"
#include "losses/topk_distillation.h"

namespace retort::distill {

class CacheDistillationObjective final : public TrainingObjective {
 public:
  std::string progress_label() const override { return "distill"; }
  // Opens distill.cache_dir and checks it against the run's tokenizer, data, k and temperature; loads the teacher
  // of distill.teacher, when it is there, for the validations (a cache alone trains; a warning says what is lost).
  void prepare(const RunContext& run) override;
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  nlohmann::json description() const override { return description_; }
  const TrainedModel* validation_teacher() const override { return teacher_.get(); }
  // Without tensor parallelism (a graph holds no collective): the loss of cache_graphed_loss.h.
  std::shared_ptr<const GraphableLoss> graphable_loss() const override;

 private:
  void load_validation_teacher(const RunContext& run);

  std::optional<TopKCacheReader> cache_;
  losses::TopkDistillationOptions options_;
  Device device_;
  nlohmann::json description_;
  std::unique_ptr<TrainedModel> teacher_;
};

}  // namespace retort::distill
