#pragma once
// Held-out evaluation, the one implementation behind the validation of a training run, `retort eval` and the final
// table of `retort distill run`: the plain next-token cross-entropy (no smoothing, no z-loss, whatever the training
// loss adds) and perplexity, and with a teacher the KL(teacher || student) of their full next-token distributions
// and how often their most likely next tokens agree.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "distill/train/trained_model.h"

namespace retort::distill {

struct EvalOptions {
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  int64_t max_batches = 0;  // 0: every full batch of the data
};

struct EvalReport {
  double loss = 0;  // mean next-token cross-entropy, nats/token
  double perplexity = 0;
  std::optional<double> kl_to_teacher;   // mean KL(teacher || model), nats/token
  std::optional<double> top1_agreement;  // share of tokens where both argmaxes agree
  int64_t tokens = 0;
};

// Evaluates `model` in compute dtype `dtype` over every batch of `loader` (from its start). Under tensor parallelism
// every rank evaluates the same batches and gets the same loss; the teacher figures need a single rank.
EvalReport evaluate_batches(const GptModel& model, DType dtype, data::TokenLoader& loader, int ignore_index = -100,
                            const TrainedModel* teacher = nullptr);

// Evaluates `model` (on one rank) over the token shards in order, windows of seq_len (TokenLoader's eval mode).
EvalReport evaluate_model(const TrainedModel& model, const std::vector<std::filesystem::path>& shards,
                          const EvalOptions& options, const TrainedModel* teacher = nullptr);

// The validation shards of the model's own run (its data.* keys); the data is prepared if it is not cached.
std::vector<std::filesystem::path> run_validation_shards(const std::filesystem::path& run_dir);

// Tokenizes a text corpus (a file, folder or glob) with the model's tokenizer into one token shard under
// `work_dir` and returns its path: held-out text the model never saw.
std::filesystem::path tokenize_corpus_for(const std::filesystem::path& run_dir, const std::string& corpus,
                                          const std::filesystem::path& work_dir);

// `retort eval`: a run's latest checkpoint scored on its own validation split or on text of your own, and with a
// teacher run beside it the KL and agreement figures.
struct RunEvaluationRequest {
  std::filesystem::path run_dir;
  std::string data;                   // a corpus (file, folder or glob); empty: the run's validation split
  std::filesystem::path teacher_dir;  // empty: no teacher
  Device device = Device::cpu();
  int64_t max_batches = 0;  // 0: all
};

struct RunEvaluation {
  EvalReport report;
  std::filesystem::path checkpoint, teacher_checkpoint;
  int64_t step = 0;
};

RunEvaluation evaluate_run(const RunEvaluationRequest& request);

}  // namespace retort::distill
