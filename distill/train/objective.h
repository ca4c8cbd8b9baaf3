#pragma once
// What a training run optimises. The loop (training_loop.h) owns the model, the data, the optimizer, metrics and
// checkpoints; an objective turns the student's logits of one micro-batch into the loss to differentiate. The
// labels' cross-entropy (labels_objective.h) is the run without a teacher; distill/objectives/ holds the teachers'
// objectives (the top-k cache, an online teacher). A new objective is one more subclass: it never touches the loop.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/tensor/device.h"
#include "core/tensor/tensor.h"
#include "distill/train/trained_model.h"
#include "parallel/comm/communicator.h"

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

  // student logits [B, T, V_local] (vocab-split over the tp group) of `batch`'s inputs -> the micro-batch loss.
  virtual ObjectiveLoss micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) = 0;

  // What the run's "loss" means, after prepare(): a JSON object with a "name" ("labels", "topk_cache", "online") and
  // every setting that changes the loss's meaning. The loop writes it to <run>/objective.json; `retort compare`
  // refuses to compare the loss of runs whose descriptions differ.
  virtual nlohmann::json description() const = 0;

  // The teacher the validations compare the model with (KL and top-1 agreement in metrics.jsonl), split like the
  // model; null for a run without one.
  virtual const TrainedModel* validation_teacher() const { return nullptr; }
};

}  // namespace retort::distill
