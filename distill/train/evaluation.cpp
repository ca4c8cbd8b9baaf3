#include "distill/train/evaluation.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/data/corpus.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "distill/train/config_builders.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"

namespace retort::distill {

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

EvalReport evaluate_batches(const GptModel& model, DType dtype, data::TokenLoader& loader, int ignore_index,
                            const TrainedModel* teacher) {
  NoGradGuard no_grad;
  loader.reset();
  const Device device = model.parameters().front().device();
  losses::CrossEntropyOptions plain;
  plain.ignore_index = ignore_index;
  double loss_sum = 0, kl_sum = 0;
  int64_t agree = 0, tokens = 0;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const data::TokenBatch batch = loader.next();
    const Tensor inputs = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
    const Tensor labels = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
    const Tensor logits = model.forward(inputs, dtype);
    const int64_t n = batch.batch * batch.seq;
    loss_sum += losses::cross_entropy(logits, labels, plain).item() * static_cast<double>(n);
    if (teacher) {
      const Tensor teacher_logits = inference_logits(*teacher, inputs);
      agree += argmax_agreements(logits, teacher_logits);
      kl_sum += losses::distribution_loss(logits, teacher_logits, Tensor()).item() * static_cast<double>(n);
    }
    tokens += n;
  }
  EvalReport report;
  report.tokens = tokens;
  report.loss = tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0;
  report.perplexity = std::exp(report.loss);
  if (teacher) {
    report.kl_to_teacher = kl_sum / static_cast<double>(tokens);
    report.top1_agreement = static_cast<double>(agree) / static_cast<double>(tokens);
  }
  return report;
}

EvalReport evaluate_model(const TrainedModel& model, const std::vector<fs::path>& shards, const EvalOptions& options,
                          const TrainedModel* teacher) {
  RETORT_INPUT_CHECK(options.seq_len <= model.model->config().block_size,
                     "evaluation sequence length {} is longer than the model's context {}: lower it", options.seq_len,
                     model.model->config().block_size);
  if (teacher)
    RETORT_INPUT_CHECK(options.seq_len <= teacher->model->config().block_size,
                       "evaluation sequence length {} is longer than the teacher's context {}: lower it",
                       options.seq_len, teacher->model->config().block_size);
  data::TokenLoader loader(
      shards, model.vocab_size,
      {options.batch_size, options.seq_len, data::LoaderMode::kEval, 0, 0, 1, options.max_batches});
  return evaluate_batches(*model.model, model.dtype, loader, -100, teacher);
}

std::vector<fs::path> run_validation_shards(const fs::path& run_dir) {
  return data::prepare_token_dataset(dataset_options_from(load_run_config(run_dir))).val_shards;
}

fs::path tokenize_corpus_for(const fs::path& run_dir, const std::string& corpus, const fs::path& work_dir) {
  const ResolvedConfig config = load_run_config(run_dir);
  const data::Tokenizer tokenizer = load_run_tokenizer(run_dir);
  std::vector<int32_t> tokens;
  for (const std::string& document :
       data::read_documents(data::resolve_corpus(corpus), config.get_string("data.text_field"))) {
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

RunEvaluation evaluate_run(const RunEvaluationRequest& request) {
  const TrainedModel model = load_trained_model(request.run_dir, request.device);
  std::optional<TrainedModel> teacher;
  if (!request.teacher_dir.empty()) {
    teacher = load_trained_model(request.teacher_dir, request.device);
    check_same_tokenizer(*teacher, model.tokenizer_fingerprint, model.vocab_size, "teacher");
  }
  const ResolvedConfig config = load_run_config(request.run_dir);
  // The model's own validation split, or the given text tokenized with its tokenizer.
  const std::vector<fs::path> shards =
      request.data.empty()
          ? run_validation_shards(request.run_dir)
          : std::vector<fs::path>{tokenize_corpus_for(request.run_dir, request.data, request.run_dir / "eval_data")};
  EvalOptions options;
  options.batch_size = config.get_int("train.batch_size");
  options.seq_len = config.get_int("train.seq_len");
  options.max_batches = request.max_batches;
  RunEvaluation evaluation;
  evaluation.report = evaluate_model(model, shards, options, teacher ? &*teacher : nullptr);
  evaluation.checkpoint = model.checkpoint;
  evaluation.step = model.step;
  if (teacher) evaluation.teacher_checkpoint = teacher->checkpoint;
  return evaluation;
}

}  // namespace retort::distill
