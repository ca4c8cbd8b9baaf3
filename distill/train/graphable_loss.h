#pragma once
// A micro-batch loss that the graphed training step (graphed_train_step.h) can record into a CUDA graph: its targets
// have shapes fixed for the run and reach the device through the graph's own copies from pinned host buffers, and the
// loss, with the values reported beside it, is computed there with nothing read on the host. An objective offers one
// (TrainingObjective::graphable_loss) when its eager micro_batch_loss computes exactly this.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "core/tensor/tensor.h"
#include "losses/cross_entropy.h"

namespace retort::distill {

// One target tensor of a micro-batch, as the graph's copy fills it.
struct StagedTensor {
  Shape shape;
  DType dtype;
};

// What the recorded work computes: the loss and the 0-dim values the metrics are made of.
struct GraphedLoss {
  Tensor loss;                 // 0-dim, on the tape
  std::vector<Tensor> values;  // 0-dim each, read back with the loss
};

class GraphableLoss {
 public:
  virtual ~GraphableLoss() = default;
  // The target tensors of a batch x seq micro-batch, beside its input ids (which the step stages itself).
  virtual std::vector<StagedTensor> targets(int64_t batch, int64_t seq) const = 0;
  // Checks `batch`'s targets against a vocabulary of `vocab` tokens (the graph cannot stop on a bad id) and writes
  // them into `host`: one buffer per targets() entry, row-major, of exactly its size.
  virtual void stage(const data::TokenBatch& batch, int64_t vocab, const std::vector<void*>& host) const = 0;
  // Enqueues the loss of the student's logits [batch, seq, V] against the device targets (in targets()'s order).
  virtual GraphedLoss loss(const Tensor& logits, const std::vector<Tensor>& targets) const = 0;
  // The metrics of the micro-batch, named as the eager objective names them, from the loss and the values.
  virtual std::map<std::string, double> metrics(double loss, const std::vector<double>& values) const = 0;
};

// The labels' cross-entropy without label smoothing or z-loss: its one target is the labels, its metric "ce" the
// loss itself.
std::shared_ptr<const GraphableLoss> graphable_cross_entropy(const losses::CrossEntropyOptions& options);

// Throws the eager loss's error for a label outside the vocabulary (and not ignore_index).
void check_labels_on_host(const std::vector<int32_t>& labels, int64_t vocab, int ignore_index);

}  // namespace retort::distill
