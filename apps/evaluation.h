#pragma once
// Held-out evaluation of a trained model (`retort eval`, and the final table of `retort distill run`): the
// next-token loss and perplexity, and with a teacher the KL(teacher || student) of their full next-token
// distributions and how often their most likely next tokens agree.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "apps/trained_model.h"

namespace retort::apps {

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

// Evaluates `model` (on one rank) over the token shards in order, windows of seq_len (TokenLoader's eval mode).
EvalReport evaluate_model(const TrainedModel& model, const std::vector<std::filesystem::path>& shards,
                          const EvalOptions& options, const TrainedModel* teacher = nullptr);

// The validation shards of the model's own run (its data.* keys); the data is prepared if it is not cached.
std::vector<std::filesystem::path> run_validation_shards(const std::filesystem::path& run_dir);

// Tokenizes a text corpus (a file, folder or glob) with the model's tokenizer into one token shard under
// `work_dir` and returns its path: held-out text the model never saw.
std::filesystem::path tokenize_corpus_for(const std::filesystem::path& run_dir, const std::string& corpus,
                                          const std::filesystem::path& work_dir);

}  // namespace retort::apps
