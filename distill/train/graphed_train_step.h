#pragma once
// The training step replayed as CUDA graphs once its shapes are fixed ("CUDA graphs for the steady-state step"), for
// an objective whose loss can be recorded (graphable_loss.h: the labels' cross-entropy, the top-k cache's
// distillation). Graphs for one micro-batch's forward, loss and backward (the first of a step writing over the
// gradients, the later ones adding to them) and for the update (the global gradient norm, the clip factor and one
// multi-tensor AdamW launch). Between them the host reads the loss, so a NaN still stops the run before the update,
// exactly as in the eager loop. The step-dependent scalars (learning rate, bias corrections), the batch's ids and the
// loss's targets reach the graphs through pinned staging buffers copied in by the graphs themselves.
//
// The first two steps run eagerly (the first makes the gradients, the working copies and the library workspaces that
// the graphs then reuse at fixed addresses; the second measures the peak its activations need); the third records
// the graphs, their tensors carved from arenas of that size that reuse freed blocks (no memory nodes), and every
// later step replays them. If a recording fails, the step says why (fallback_reason) and runs the same work eagerly
// from then on: the results are the same either way (the update's arithmetic is one kernel in both). On the CPU
// everything runs eagerly.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/data/loader.h"
#include "core/tensor/tensor.h"
#include "distill/train/graphable_loss.h"
#include "optim/adamw/adamw.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

struct GraphedStepOptions {
  int64_t batch = 0, seq = 0;  // every micro-batch's shape: the graphs are recorded for it
  int64_t grad_accum = 1;      // micro-batches per update; the loss of each is scaled by 1 / grad_accum
  double max_norm = 0;         // optim.grad_clip (<= 0: no clipping)
  DType compute_dtype = DType::F32;
  std::shared_ptr<const GraphableLoss> loss;  // null: the labels' cross-entropy with default options
  bool record_graphs = true;                  // false: always eager (the same work, for comparisons)
};

// Why a run cannot take graphed steps, or nullopt when it can: it needs one GPU rank (no tp or dp group), the AdamW
// optimizer and an objective whose loss can be recorded (TrainingObjective::graphable_loss).
std::optional<std::string> graphed_step_refusal(Device device, int tp_size, int dp_size, const std::string& optimizer,
                                                bool objective_graphable);

class GraphedTrainStep {
 public:
  GraphedTrainStep(GptModel& model, optim::AdamW& optimizer, const GraphedStepOptions& options, Device device);
  ~GraphedTrainStep();
  GraphedTrainStep(const GraphedTrainStep&) = delete;
  GraphedTrainStep& operator=(const GraphedTrainStep&) = delete;

  // One micro-batch (batch x seq ids and the loss's targets, checked against the vocabulary here): forward, loss and
  // backward into the gradients. Returns its loss, unscaled (waits for it).
  double micro_batch(const data::TokenBatch& batch);
  // The metrics of the last micro-batch, as the objective's eager loss reports them ("ce", "kd", ...).
  const std::map<std::string, double>& last_metrics() const;
  // The update at learning rate `lr` over the gradients accumulated since the last one (the next micro-batch
  // writes over them). Returns the gradient norm before clipping (waits for it).
  double update(double lr);

  // Whether the micro-batch and the update now replay as graphs.
  bool graphed() const;
  // Why they do not, when a recording failed; empty otherwise.
  const std::string& fallback_reason() const;
  // Nodes of the two graphs (0 before they are recorded), for logs and benchmarks.
  int64_t graph_nodes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace retort::distill
