#include "apps/evaluation.h"

#include <algorithm>
#include <cmath>

#include "apps/train_config.h"
#include "core/autograd/grad_mode.h"
#include "core/data/corpus.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"

namespace retort::apps {

namespace fs = std::filesystem;

namespace {

// Positions of [rows, V] logits where both row argmaxes are equal (host arithmetic: evaluation is small).
int64_t argmax_agreements(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  const int64_t V = a.size(a.ndim() - 1), rows = a.numel() / V;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row_x = x.begin() + r * V, row_y = y.begin() + r * V;
    agree += (std::max_element(row_x, row_x + V) - row_x) == (std::max_element(row_y, row_y + V) - row_y);
  }
  return agree;
}

}  // namespace

EvalReport evaluate_model(const TrainedModel& model, const std::vector<fs::path>& shards, const EvalOptions& options,
                          const TrainedModel* teacher) {
  RETORT_INPUT_CHECK(options.seq_len <= model.model->config().block_size,
                     "evaluation sequence length {} is longer than the model's context {}: lower it", options.seq_len,
                     model.model->config().block_size);
  if (teacher)
    RETORT_INPUT_CHECK(options.seq_len <= teacher->model->config().block_size,
                       "evaluation sequence length {} is longer than the teacher's context {}: lower it",
                       options.seq_len, teacher->model->config().block_size);
  NoGradGuard no_grad;
  data::TokenLoader loader(
      shards, model.vocab_size,
      {options.batch_size, options.seq_len, data::LoaderMode::kEval, 0, 0, 1, options.max_batches});
  const Device device = model.model->parameters().front().device();
  double loss_sum = 0, kl_sum = 0;
  int64_t agree = 0, tokens = 0;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const data::TokenBatch batch = loader.next();
    const Tensor inputs = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
    const Tensor labels = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
    const Tensor logits = inference_logits(model, inputs);
    const int64_t n = batch.batch * batch.seq;
    loss_sum += losses::cross_entropy(logits, labels).item() * static_cast<double>(n);
    if (teacher) {
      const Tensor teacher_logits = inference_logits(*teacher, inputs);
      agree += argmax_agreements(logits, teacher_logits);
      kl_sum += losses::distribution_loss(logits, teacher_logits, Tensor()).item() * static_cast<double>(n);
    }
    tokens += n;
  }
  EvalReport report;
  report.tokens = tokens;
  report.loss = loss_sum / static_cast<double>(tokens);
  report.perplexity = std::exp(report.loss);
  if (teacher) {
    report.kl_to_teacher = kl_sum / static_cast<double>(tokens);
    report.top1_agreement = static_cast<double>(agree) / static_cast<double>(tokens);
  }
  return report;
}

std::vector<fs::path> run_validation_shards(const fs::path& run_dir) {
  return data::prepare_token_dataset(dataset_options_from(load_run_config(run_dir))).val_shards;
}

fs::path tokenize_corpus_for(const fs::path& run_dir, const std::string& corpus, const fs::path& work_dir) {
  const ResolvedConfig config = load_run_config(run_dir);
  const fs::path tokenizer_path = fs::path(config.get_string("data.dir")) / "tokenizer.model";
  RETORT_INPUT_CHECK(fs::exists(tokenizer_path), "the model's tokenizer {} is missing: prepare its data again",
                     tokenizer_path.string());
  const data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_path);
  std::vector<int32_t> tokens;
  for (const std::string& document : data::read_documents(data::resolve_corpus(corpus))) {
    const std::vector<int32_t> ids = tokenizer.encode(document);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.eos_id());
  }
  RETORT_INPUT_CHECK(!tokens.empty(), "--data {}: no text found", corpus);
  fs::create_directories(work_dir);
  const fs::path shard = work_dir / "eval_000.bin";
  data::write_token_shard(shard, tokens, config.get_int("data.vocab_size"));
  return shard;
}

}  // namespace retort::apps
