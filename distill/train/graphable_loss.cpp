#include "distill/train/graphable_loss.h"

#include <cstring>

#include "core/util/error.h"

namespace retort::distill {
namespace {

class CrossEntropyLoss final : public GraphableLoss {
 public:
  explicit CrossEntropyLoss(const losses::CrossEntropyOptions& options) : options_(options) {
    RETORT_CHECK(options.label_smoothing == 0 && options.z_loss == 0,
                 "graphable_cross_entropy: label smoothing and z-loss report a plain cross-entropy beside the loss; "
                 "such runs stay eager");
  }
  std::vector<StagedTensor> targets(int64_t batch, int64_t seq) const override { return {{{batch, seq}, DType::I32}}; }
  void stage(const data::TokenBatch& batch, int64_t vocab, const std::vector<void*>& host) const override {
    check_labels_on_host(batch.targets, vocab, options_.ignore_index);
    std::memcpy(host.at(0), batch.targets.data(), batch.targets.size() * sizeof(int32_t));
  }
  GraphedLoss loss(const Tensor& logits, const std::vector<Tensor>& targets) const override {
    return {losses::cross_entropy(logits, targets.at(0), options_), {}};
  }
  std::map<std::string, double> metrics(double loss, const std::vector<double>&) const override {
    return {{"ce", loss}};
  }

 private:
  losses::CrossEntropyOptions options_;
};

}  // namespace

std::shared_ptr<const GraphableLoss> graphable_cross_entropy(const losses::CrossEntropyOptions& options) {
  return std::make_shared<CrossEntropyLoss>(options);
}

void check_labels_on_host(const std::vector<int32_t>& labels, int64_t vocab, int ignore_index) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const int32_t t = labels[i];
    RETORT_INPUT_CHECK(t == ignore_index || (t >= 0 && t < vocab),
                       "cross_entropy: target {} at row {} is outside the vocabulary of {} (ignore_index is {}): the "
                       "data and the model disagree on the vocabulary",
                       t, i, vocab, ignore_index);
  }
}

}  // namespace retort::distill
