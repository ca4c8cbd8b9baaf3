#pragma once
// A student learning from a teacher with ANOTHER tokenizer (distill.xtoken.enabled): both read the same text, the
// teacher through the paired token stream made from the student's data (distill/xtoken/paired_stream.h). Each
// micro-batch, the student windows' bytes are found on the teacher's side, the two token rows aligned into chunks
// (distill/xtoken/xtoken_batch.h), and the teacher's per-position top-k at distill.temperature, from an online
// forward (distill.mode online) or from the top-k cache written over the teacher's own tokens (distill.mode cache),
// is compared per chunk with the student's distribution projected on the teacher's vocabulary
// (losses::chunk_distillation_loss, the projection of distill/xtoken/vocab_projection.h).
//
// The loss is normalised by the valid chunks of the GLOBAL micro-batch: the count is all-reduced over the data-
// parallel ranks before the loss, on every rank. Metrics: kd, ce, chunk_coverage (the share of the student's
// prediction positions inside an aligned chunk), chunks (per row), xtoken_batch_ms (building the teacher rows and
// the alignment on the host) and teacher_ms (the teacher's forward and top-k, or the cache read).
#include <memory>
#include <optional>

#include "distill/cache/topk_cache.h"
#include "distill/train/objective.h"
#include "distill/train/trained_model.h"
#include "distill/xtoken/paired_stream.h"
#include "distill/xtoken/xtoken_batch.h"
#include "losses/chunk_distillation.h"

namespace retort::distill {

class CrossTokenizerObjective final : public TrainingObjective {
 public:
  std::string progress_label() const override { return "distill"; }
  // Loads the teacher's tokenizer (and, online, the teacher split like the student), makes or reuses the paired
  // stream and the vocabulary projection in distill.xtoken.dir, opens the cache (cache mode) and checks that each
  // belongs to this data, this teacher and these settings.
  void prepare(const RunContext& run) override;
  ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) override;
  nlohmann::json description() const override { return description_; }
  // None: per-token KL and agreement are undefined between two tokenizers (bits per byte compares the models).

  // The teacher's targets of a micro-batch's teacher rows, from the online teacher or from the cache. Rows past the
  // end of the cache have their positions' chunks dropped (on both sides) first.
  losses::ChunkTeacherTargets teacher_targets(xtoken::XtokenBatch& batch);

 private:
  std::unique_ptr<TrainedModel> teacher_;  // online mode
  std::optional<TopKCacheReader> cache_;   // cache mode
  xtoken::PairedStream stream_;
  xtoken::TokenTexts student_texts_, teacher_texts_;
  losses::VocabProjection projection_;
  losses::CommonIds common_;  // kGold: the exactly mapped id pairs
  losses::ChunkDistillationOptions options_;
  std::shared_ptr<Communicator> tp_group_, dp_group_;
  int k_ = 64;
  int64_t teacher_context_ = 0;
  double min_coverage_ = 0;
  bool coverage_checked_ = false;
  Device device_;
  nlohmann::json description_;
};

}  // namespace retort::distill
