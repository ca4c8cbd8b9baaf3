#include "distill/objectives/cache_objective.h"

#include <spdlog/spdlog.h>

#include "distill/cache/cache_targets.h"
#include "distill/distill_config.h"
#include "distill/objectives/plain_cross_entropy.h"

namespace retort::distill {

void CacheDistillationObjective::prepare(const RunContext& run) {
  const ResolvedConfig& config = *run.config;
  const data::PreparedDataset& dataset = *run.dataset;
  CacheRequirements need;
  need.k = static_cast<int>(config.get_int("distill.k"));
  need.tokenizer_id = dataset.tokenizer_fingerprint;
  need.vocab_size = dataset.vocab_size;
  need.dataset = token_stream_identity(dataset.train_shards, dataset.vocab_size);
  need.temperature = config.get_double("distill.temperature");
  cache_.emplace(open_matching_cache(cache_dir(config), need));
  spdlog::info("distill: top-k cache '{}' ({} tokens, k = {}, {})", cache_dir(config).string(), cache_->tokens(),
               cache_->k(), cache_value_type_name(cache_->spec().value_type));
  options_ = topk_loss_options_from(config);
  options_.group = run.tp_group;
  device_ = run.device;
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

}  // namespace retort::distill
