#include "distill/objectives/cache_graphed_loss.h"

#include <cstring>

#include "core/autograd/grad_mode.h"
#include "distill/cache/cache_targets.h"
#include "losses/cross_entropy.h"

namespace retort::distill {
namespace {

class CacheLoss final : public GraphableLoss {
 public:
  CacheLoss(const TopKCacheReader& cache, const losses::TopkDistillationOptions& options)
      : cache_(cache), options_(options) {}

  // The teacher's ids and log-probabilities [B, T, k], the mask [B, T] and the labels [B, T].
  std::vector<StagedTensor> targets(int64_t batch, int64_t seq) const override {
    const int64_t k = cache_.k();
    return {{{batch, seq, k}, DType::I32},
            {{batch, seq, k}, DType::F32},
            {{batch, seq}, DType::I32},
            {{batch, seq}, DType::I32}};
  }

  void stage(const data::TokenBatch& batch, int64_t vocab, const std::vector<void*>& host) const override {
    const losses::TopkTargets t = cache_targets_for_batch(cache_, batch);
    // The loss's own checks (its options need the labels present), and the labels again for the CE metric, which
    // reads them even at kd_ratio 1 where the loss does not.
    losses::check_topk_targets_on_host(t, vocab, options_);
    check_labels_on_host(batch.targets, vocab, options_.ignore_index);
    const Tensor* parts[] = {&t.indices, &t.logprobs, &t.mask, &t.labels};
    for (size_t i = 0; i < 4; ++i) std::memcpy(host.at(i), parts[i]->raw_data(), parts[i]->nbytes());
  }

  GraphedLoss loss(const Tensor& logits, const std::vector<Tensor>& targets) const override {
    losses::TopkTargets t;
    t.indices = targets.at(0);
    t.logprobs = targets.at(1);
    t.mask = targets.at(2);
    t.labels = targets.at(3);
    Tensor loss = losses::topk_distillation_loss(logits, t, options_);
    NoGradGuard no_grad;
    losses::CrossEntropyOptions plain;
    plain.ignore_index = options_.ignore_index;
    return {loss, {losses::cross_entropy(logits, t.labels, plain)}};
  }

  // As the eager objective: the KD part alone, from the mix kd_ratio x KD + (1 - kd_ratio) x CE.
  std::map<std::string, double> metrics(double loss, const std::vector<double>& values) const override {
    const double ce = values.at(0), r = options_.kd_ratio;
    return {{"ce", ce}, {"kd", r > 0 ? (loss - (1 - r) * ce) / r : 0.0}};
  }

 private:
  const TopKCacheReader& cache_;
  losses::TopkDistillationOptions options_;
};

}  // namespace

std::shared_ptr<const GraphableLoss> graphable_cache_loss(const TopKCacheReader& cache,
                                                          const losses::TopkDistillationOptions& options) {
  return std::make_shared<CacheLoss>(cache, options);
}

}  // namespace retort::distill
