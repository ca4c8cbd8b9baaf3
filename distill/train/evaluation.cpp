#include "distill/train/evaluation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/autograd/grad_mode.h"
#include "core/config/config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/util/error.h"
#include "distill/train/config_builders.h"
#include "distill/train/eval_data_cache.h"
#include "distill/train/model_run_dir.h"
#include "distill/train/token_bytes.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"
#include "parallel/launch/distributed_run.h"
#include "parallel/models/hf_config.h"
#include "parallel/tp/vocab_topk.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// Positions where both models' most likely next tokens are the same: the exact global argmax of vocab-split logits
// (ties to the smaller id), so the count does not depend on the tp size.
int64_t argmax_agreements(const Tensor& a, const Tensor& b) {
  tp::VocabTopKOptions top1;
  top1.k = 1;
  const std::vector<int32_t> x = tp::vocab_topk(a, top1).indices.to_ints(),
                             y = tp::vocab_topk(b, top1).indices.to_ints();
  int64_t agree = 0;
  for (size_t i = 0; i < x.size(); ++i) agree += x[i] == y[i];
  return agree;
}

// The sums of one evaluation, added over the processes of a split.
struct EvalSums {
  double loss = 0, kl = 0, agree = 0, tokens = 0, bytes = 0;

  void add_over(const EvalSplit& split) {
    if (!split.host_group) return;
    const double mine = split.adds ? 1.0 : 0.0;
    Tensor t = Tensor::from_doubles({loss * mine, kl * mine, agree * mine, tokens * mine, bytes * mine}, {5});
    split.host_group->all_reduce(t, ReduceOp::Sum);
    const std::vector<double> total = t.to_doubles();
    loss = total[0], kl = total[1], agree = total[2], tokens = total[3], bytes = total[4];
  }
};

}  // namespace

EvalReport evaluate_batches(const GptModel& model, DType dtype, data::TokenLoader& loader,
                            const BatchEvalOptions& options) {
  NoGradGuard no_grad;
  loader.reset();
  const Device device = model.parameters().front().device();
  losses::CrossEntropyOptions plain;
  plain.ignore_index = options.ignore_index;
  const TrainedModel* teacher = options.teacher;
  EvalSums sums;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const data::TokenBatch batch = loader.next();
    if (i % options.split.parts != options.split.part) continue;
    const Tensor inputs = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
    const Tensor labels = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
    const Tensor logits = model.forward(inputs, dtype);
    const auto n = static_cast<double>(batch.batch * batch.seq);
    sums.loss += losses::cross_entropy(logits, labels, plain).item() * n;
    if (teacher) {
      const Tensor teacher_logits = inference_logits(*teacher, inputs);
      sums.agree += static_cast<double>(argmax_agreements(logits, teacher_logits));
      sums.kl += losses::distribution_loss(logits, teacher_logits, Tensor()).item() * n;
    }
    if (options.token_bytes) sums.bytes += static_cast<double>(utf8_bytes_of(batch.targets, *options.token_bytes));
    sums.tokens += n;
  }
  sums.add_over(options.split);
  EvalReport report;
  report.tokens = static_cast<int64_t>(sums.tokens);
  report.loss = sums.tokens > 0 ? sums.loss / sums.tokens : 0.0;
  report.perplexity = std::exp(report.loss);
  if (options.token_bytes) {
    report.bytes = static_cast<int64_t>(sums.bytes);
    if (sums.bytes > 0) report.bits_per_byte = sums.loss / std::numbers::ln2 / sums.bytes;
  }
  if (teacher && sums.tokens > 0) {
    report.kl_to_teacher = sums.kl / sums.tokens;
    report.top1_agreement = sums.agree / sums.tokens;
  }
  return report;
}

EvalReport evaluate_model(const TrainedModel& model, const std::vector<fs::path>& shards, const EvalOptions& options,
                          const TrainedModel* teacher, const std::vector<int32_t>* token_bytes,
                          const EvalSplit& split) {
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
  BatchEvalOptions how;
  how.teacher = teacher;
  how.token_bytes = token_bytes;
  how.split = split;
  return evaluate_batches(*model.model, model.dtype, loader, how);
}

std::vector<fs::path> run_validation_shards(const fs::path& run_dir) {
  return data::prepare_token_dataset(dataset_options_from(load_run_config(run_dir))).val_shards;
}

RunEvaluation evaluate_run(const RunEvaluationRequest& request) {
  check_model_run_dir(request.run_dir, "--checkpoint");
  if (!request.teacher_dir.empty()) check_model_run_dir(request.teacher_dir, "--teacher");
  // A Hugging Face folder has no run config and no validation split: it is scored on --data with the default
  // batch, its sequences cut to its context.
  const bool hf_folder = is_hf_checkpoint_folder(request.run_dir) && !fs::exists(request.run_dir / "config.yaml");
  RETORT_INPUT_CHECK(!hf_folder || !request.data.empty(),
                     "--checkpoint '{}' is a Hugging Face folder: it has no validation split to score; give --data "
                     "with a text or JSON-lines file",
                     request.run_dir.string());
  const DistributedRun dist = start_distributed_run(request.device, request.tp);
  const bool main = dist.is_main();
  if (!main) spdlog::set_level(spdlog::level::warn);
  const ProcessGrid& grid = dist.grid;
  const TrainedModel model = load_trained_model(request.run_dir, dist.device, grid.tp, request.step);
  std::optional<TrainedModel> teacher;
  if (!request.teacher_dir.empty()) {
    teacher = load_trained_model(request.teacher_dir, dist.device, grid.tp);
    check_same_tokenizer(*teacher, model.tokenizer_fingerprint, model.vocab_size, "teacher");
  }
  // A run trained on pre-tokenized shards without a tokenizer scores its own split in nats per token only: nothing
  // says which bytes its ids stand for.
  const bool has_tokenizer = model.tokenizer_fingerprint != data::kNoTokenizerFingerprint;
  const std::optional<data::Tokenizer> tokenizer =
      has_tokenizer || !request.data.empty() ? std::optional(load_run_tokenizer(model)) : std::nullopt;
  const std::vector<int32_t> token_bytes = tokenizer ? utf8_bytes_per_token(*tokenizer) : std::vector<int32_t>{};
  RunEvaluation evaluation;
  evaluation.data = request.data.empty() ? "validation split" : request.data;
  // Rank 0 prepares (or tokenizes) the data; the others then find it cached.
  if (!main) dist.barrier();
  const ResolvedConfig config = hf_folder ? Config().resolve(training_schema()) : load_run_config(request.run_dir);
  evaluation.shards = request.data.empty()
                          ? run_validation_shards(request.run_dir)
                          : std::vector<fs::path>{eval_data_shard(request.data, config.get_string("data.text_field"),
                                                                  *tokenizer, request.data_cache)
                                                      .shard};
  if (main) dist.barrier();

  EvalOptions options;
  options.batch_size = config.get_int("train.batch_size");
  options.seq_len = std::min(config.get_int("train.seq_len"), model.model->config().block_size);
  options.max_batches = request.max_batches;
  EvalSplit split;
  split.part = grid.dp_rank;
  split.parts = grid.dp_size;
  split.adds = grid.tp_rank == 0;
  split.host_group = dist.host_world;
  evaluation.report = evaluate_model(model, evaluation.shards, options, teacher ? &*teacher : nullptr,
                                     tokenizer ? &token_bytes : nullptr, split);
  evaluation.run_dir = request.run_dir;
  evaluation.checkpoint = model.checkpoint;
  evaluation.step = model.step;
  if (teacher) evaluation.teacher_checkpoint = teacher->checkpoint;
  evaluation.tp = grid.tp_size;
  evaluation.dp = grid.dp_size;
  evaluation.main_rank = main;
  return evaluation;
}

nlohmann::ordered_json evaluation_json(const RunEvaluation& e) {
  const EvalReport& r = e.report;
  nlohmann::ordered_json out;
  out["run"] = e.run_dir.string();
  out["checkpoint"] = e.checkpoint.string();
  out["step"] = e.step;
  out["data"] = e.data;
  out["tokens"] = r.tokens;
  out["bytes"] = r.bytes;
  out["loss"] = r.loss;
  out["perplexity"] = r.perplexity;
  out["bits_per_byte"] = r.bits_per_byte ? nlohmann::ordered_json(*r.bits_per_byte) : nlohmann::ordered_json();
  if (r.kl_to_teacher) {
    out["teacher"] = e.teacher_checkpoint.string();
    out["kl_to_teacher"] = *r.kl_to_teacher;
    out["top1_agreement"] = *r.top1_agreement;
  }
  out["tp"] = e.tp;
  out["dp"] = e.dp;
  return out;
}

}  // namespace retort::distill
