#pragma once
// Held-out evaluation, the one implementation behind the validation of a training run, `retort eval` and the final
// table of `retort distill run`: the plain next-token cross-entropy (no smoothing, no z-loss, whatever the training
// loss adds), perplexity and bits per byte (token_bytes.h), and with a teacher the KL(teacher || student) of their
// full next-token distributions and how often their most likely next tokens agree.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "distill/train/trained_model.h"
#include "parallel/comm/communicator.h"

namespace retort::distill {

struct EvalOptions {
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  int64_t max_batches = 0;  // 0: every full batch of the data
};

struct EvalReport {
  double loss = 0;  // mean next-token cross-entropy, nats/token
  double perplexity = 0;
  std::optional<double> bits_per_byte;   // total nats / ln 2 / bytes, when the tokens' byte sizes are known
  std::optional<double> kl_to_teacher;   // mean KL(teacher || model), nats/token
  std::optional<double> top1_agreement;  // share of tokens where both argmaxes agree
  int64_t tokens = 0;
  int64_t bytes = 0;  // UTF-8 bytes the scored tokens stand for (0 when unknown)
};

// Several processes sharing one evaluation: the ranks of one data-parallel replica (its tp ranks) evaluate the same
// batches, replica `part` of `parts` takes batches part, part + parts, ... of the one-process order, and the sums
// meet over `host_group` (every rank, CPU tensors) with one rank per replica (`adds`) counting them, so the
// figures are those of one process up to the order of the additions.
struct EvalSplit {
  int part = 0, parts = 1;
  bool adds = true;
  std::shared_ptr<Communicator> host_group;  // null: no other process
};

struct BatchEvalOptions {
  int ignore_index = -100;
  const TrainedModel* teacher = nullptr;  // split like the model (the same tp group); adds the teacher figures
  const std::vector<int32_t>* token_bytes = nullptr;  // UTF-8 bytes per token id (token_bytes.h): adds bits/byte
  EvalSplit split;
};

// Evaluates `model` in compute dtype `dtype` over every batch of `loader` (from its start). Under tensor parallelism
// every rank of the tp group evaluates the same batches and gets the same figures.
EvalReport evaluate_batches(const GptModel& model, DType dtype, data::TokenLoader& loader,
                            const BatchEvalOptions& options = {});

// Evaluates `model` over the token shards in order, windows of seq_len (TokenLoader's eval mode).
EvalReport evaluate_model(const TrainedModel& model, const std::vector<std::filesystem::path>& shards,
                          const EvalOptions& options, const TrainedModel* teacher = nullptr,
                          const std::vector<int32_t>* token_bytes = nullptr, const EvalSplit& split = {});

// The validation shards of the model's own run (its data.* keys); the data is prepared if it is not cached.
std::vector<std::filesystem::path> run_validation_shards(const std::filesystem::path& run_dir);

// `retort eval`: a run's latest checkpoint (or the one of `step`) scored on its own validation split or on text of
// your own, and with a teacher run beside it the KL and agreement figures; on one process or on the ranks of a
// launch (dp x tp, parallel.tp = tp), with the same figures.
struct RunEvaluationRequest {
  std::filesystem::path run_dir;
  std::string data;                   // a corpus (file, folder or glob); empty: the run's validation split
  std::filesystem::path teacher_dir;  // empty: no teacher
  Device device = Device::cpu();
  int64_t max_batches = 0;      // 0: all
  std::optional<int64_t> step;  // empty: the latest checkpoint
  int tp = 1;                   // tensor-parallel degree; the launch's ranks / tp replicas share the batches
  std::filesystem::path data_cache = "data/eval";  // where --data's token shards are kept (eval_data_cache.h)
};

struct RunEvaluation {
  EvalReport report;
  std::filesystem::path run_dir, checkpoint, teacher_checkpoint;
  int64_t step = 0;
  std::string data;  // "validation split" or the --data spec
  std::vector<std::filesystem::path> shards;
  int tp = 1, dp = 1;
  bool main_rank = true;  // world rank 0: the one that reports
};

RunEvaluation evaluate_run(const RunEvaluationRequest& request);

// The evaluation as one JSON object (`retort eval --json`).
nlohmann::ordered_json evaluation_json(const RunEvaluation& evaluation);

}  // namespace retort::distill
