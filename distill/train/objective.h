#pragma once
// What a training run optimises. The loop (training_loop.h) owns the model, the data, the optimizer, metrics and
// checkpoints; an objective turns the student's logits of one micro-batch into the loss to differentiate. The
// labels' cross-entropy (labels_objective.h) is the run without a teacher; distill/objectives/ holds the teachers'
// objectives (the top-k cache, an online teacher). A new objective is one more subclass: it never touches the loop.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/tensor/device.h"
#include "core/tensor/tensor.h"
#include "distill/train/graphable_loss.h"
#include "distill/train/trained_model.h"
#include "losses/cross_entropy.h"
#include "parallel/comm/communicator.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

// The loss of one micro-batch and the side values reported beside it.
struct ObjectiveLoss {
  Tensor loss;  // 0-dim, on the tape: backward() of it (scaled by 1 / grad_accum) gives the gradients
  // Averaged over the step's micro-batches and the dp ranks into metrics.jsonl (e.g. "ce", "kd").
  std::map<std::string, double> metrics;
};

// What an objective sees of the run it is part of, once the data and the process grid exist.
struct RunContext {
  Device device;
  DType dtype;                             // the model's compute dtype
  std::shared_ptr<Communicator> tp_group;  // null without tensor parallelism
  // The data-parallel group (null without data parallelism): an objective that normalises by a count over the
  // whole global batch all-reduces it here, on every rank, before any rank may skip work.
  std::shared_ptr<Communicator> dp_group;
  const ResolvedConfig* config = nullptr;          // the run's config
  const data::PreparedDataset* dataset = nullptr;  // the prepared data (tokenizer, shards)
};

class TrainingObjective {
 public:
  virtual ~TrainingObjective() = default;

  // The label of the progress line ("train", "distill").
  virtual std::string progress_label() const = 0;

  // Called once before the first step: open caches, load a teacher, check that they match the run's data.
  virtual void prepare(const RunContext& run) = 0;

  // Called with every micro-batch the data gives, before the student's forward: an objective that trains on other
  // tokens than the data's (the student's own continuations of the batch's prompts, on-policy) replaces `batch`
  // with them. `step` is the optimizer step (0-based) the micro-batch belongs to, so a choice made by step is the
  // same after a resume. The default trains on the data as it is.
  virtual void choose_batch(int64_t step, const GptModel& student, DType compute_dtype, data::TokenBatch& batch) {
    (void)step, (void)student, (void)compute_dtype, (void)batch;
  }

  // student logits [B, T, V_local] (vocab-split over the tp group) of `batch`'s inputs -> the micro-batch loss.
  virtual ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) = 0;

  // What the run's "loss" means, after prepare(): a JSON object with a "name" ("labels", "topk_cache", "online") and
  // every setting that changes the loss's meaning. The loop writes it to <run>/objective.json; `retort compare`
  // refuses to compare the loss of runs whose descriptions differ.
  virtual nlohmann::json description() const = 0;

  // What the micro-batch of the last choose_batch() was, written to metrics.jsonl as "batch_kind" when not empty:
  // "on_policy" (the student's own continuations) or "off_policy" (the data's tokens) for an objective that
  // trains on both; empty (nothing written) for one that trains on the data alone.
  virtual std::string batch_kind() const { return {}; }

  // The loss as a graph can record it (graphable_loss.h), when it computes exactly what micro_batch_loss does on the
  // data as it is (choose_batch keeps every batch): the loop may then replay each step as CUDA graphs
  // (graphed_train_step.h). Null, the default, keeps every step eager. Called after prepare().
  virtual std::shared_ptr<const GraphableLoss> graphable_loss() const { return nullptr; }

  // The teacher the validations compare the model with (KL and top-1 agreement in metrics.jsonl), split like the
  // model; null for a run without one.
  virtual const TrainedModel* validation_teacher() const { return nullptr; }

  // Measures of the student the objective adds to a validation's record in metrics.jsonl (every rank calls it, with
  // the model split like the student); none by default.
  virtual std::map<std::string, double> validation_metrics(const GptModel& student, DType compute_dtype) {
    (void)student, (void)compute_dtype;
    return {};
  }
};

}  // namespace retort::distill
