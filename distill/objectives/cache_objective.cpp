#include "distill/objectives/cache_objective.h"

#include <spdlog/spdlog.h>

#include "distill/cache/cache_targets.h"
#include "distill/distill_config.h"
#include "distill/objectives/cache_graphed_loss.h"
#include "distill/train/checkpoint.h"
#include "distill/train/plain_cross_entropy.h"

namespace retort::distill {

void CacheDistillationObjective::prepare(const RunContext& run) {
  const ResolvedConfig& config = *run.config;
  const data::PreparedDataset& dataset = *run.dataset;
  CacheRequirements need;
  need.kind = cache_kind_from(config);
  need.k = cache_entries_from(config);
  need.tokenizer_id = dataset.tokenizer_fingerprint;
  need.vocab_size = dataset.vocab_size;
  need.dataset = token_stream_identity(dataset.train_shards, dataset.vocab_size);
  need.temperature = config.get_double("distill.temperature");
  cache_.emplace(open_matching_cache(cache_dir(config), need));
  const bool sampled = need.kind == CacheKind::Sampled;
  spdlog::info("distill: {} cache '{}' ({} tokens, {} = {}, {})", sampled ? "sampled" : "top-k",
               cache_dir(config).string(), cache_->tokens(), sampled ? "K" : "k", cache_->k(),
               cache_value_type_name(cache_->spec().value_type));
  options_ = topk_loss_options_from(config);
  options_.group = run.tp_group;
  device_ = run.device;
  description_ = {{"name", sampled ? "sampled_cache" : "topk_cache"},
                  {"divergence", sampled ? std::string("forward_kl_sampled") : config.get_string("distill.loss")},
                  {"k", need.k},
                  {"temperature", need.temperature},
                  {"kd_ratio", options_.kd_ratio}};
  if (sampled) description_["sample_temperature"] = config.get_double("distill.sample_temperature");
  if (options_.divergence == losses::TopkDivergence::Mixed) description_["forward_weight"] = options_.forward_weight;
  load_validation_teacher(run);
}

void CacheDistillationObjective::load_validation_teacher(const RunContext& run) {
  const std::filesystem::path dir = teacher_run_dir(*run.config);
  if (!latest_checkpoint(dir)) {
    spdlog::warn("distill: the teacher {} has no checkpoint: validations report no KL to the teacher", dir.string());
    return;
  }
  auto teacher = std::make_unique<TrainedModel>(load_trained_model(dir, run.device, run.tp_group));
  if (teacher->tokenizer_fingerprint != run.dataset->tokenizer_fingerprint ||
      teacher->vocab_size != run.dataset->vocab_size) {
    spdlog::warn("distill: the teacher {} uses another tokenizer than this data: validations report no KL to it",
                 dir.string());
    return;
  }
  spdlog::info("distill: validations compare with the teacher {} (step {})", teacher->checkpoint.string(),
               teacher->step);
  teacher_ = std::move(teacher);
}

ObjectiveLoss CacheDistillationObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  losses::TopkTargets targets = cache_targets_for_batch(*cache_, batch);
  const double ce = plain_cross_entropy(logits, targets.labels.to(device_), options_.ignore_index);
  Tensor loss = losses::topk_distillation_loss(logits, targets, options_);
  const double value = loss.item();
  // The KD part alone: the mix is kd_ratio x KD + (1 - kd_ratio) x CE (CE without masking differences: the cache
  // covers the rows the CE counts except at a split's very end).
  const double kd = options_.kd_ratio > 0 ? (value - (1 - options_.kd_ratio) * ce) / options_.kd_ratio : 0.0;
  return ObjectiveLoss{loss, {{"ce", ce}, {"kd", kd}}};
}

std::shared_ptr<const GraphableLoss> CacheDistillationObjective::graphable_loss() const {
  if (!cache_ || options_.group) return nullptr;
  return graphable_cache_loss(*cache_, options_);
}

}  // namespace retort::distill
