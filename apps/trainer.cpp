#include "apps/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "apps/checkpoint.h"
#include "apps/train_config.h"
#include "core/autograd/grad_mode.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/data/token_stats.h"
#include "core/io/atomic_file.h"
#include "core/ops/ops.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "core/util/metrics_writer.h"
#include "core/util/progress.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "parallel/gpt_model.h"

namespace retort::apps {

namespace fs = std::filesystem;

namespace {

double training_unigram_entropy(const data::PreparedDataset& dataset) {
  std::vector<int64_t> counts(static_cast<size_t>(dataset.vocab_size), 0);
  for (const auto& path : dataset.train_shards) {
    auto shard = data::TokenShard::open(path, dataset.vocab_size);
    for (int64_t i = 0; i < shard.size(); ++i) ++counts[shard.token(i)];
  }
  return data::unigram_entropy(counts);
}

struct Batch {
  Tensor inputs, targets;
};

Batch to_device(const data::TokenBatch& b, Device device) {
  return {Tensor::from_ints(b.inputs, {b.batch, b.seq}, device), Tensor::from_ints(b.targets, {b.batch, b.seq})};
}

double evaluate(const GptModel& model, data::TokenLoader& loader, DType dtype, Device device, int ignore_index) {
  NoGradGuard no_grad;
  loader.reset();
  double total = 0;
  const int64_t batches = std::min<int64_t>(loader.options().max_batches > 0 ? loader.options().max_batches : 1 << 30,
                                            loader.batches_per_epoch());
  for (int64_t i = 0; i < batches; ++i) {
    Batch b = to_device(loader.next(), device);
    Tensor logits = model.forward(b.inputs, dtype);
    total += ops::cross_entropy(logits, b.targets.to(device), ignore_index).item();
  }
  return total / static_cast<double>(std::max<int64_t>(batches, 1));
}

}  // namespace

TrainResult run_training(const ResolvedConfig& config, Device device, bool resume) {
  TrainResult result;
  result.run_dir = config.get_string("run.dir");
  fs::create_directories(result.run_dir);
  const uint64_t seed = static_cast<uint64_t>(config.get_int("run.seed"));

  data::DatasetOptions data_options;
  data_options.corpus = config.get_string("data.corpus");
  data_options.data_dir = config.get_string("data.dir");
  data_options.vocab_size = config.get_int("data.vocab_size");
  data_options.val_fraction = config.get_double("data.val_fraction");
  data_options.seed = seed;
  const data::PreparedDataset dataset = data::prepare_token_dataset(data_options);
  result.unigram_entropy = training_unigram_entropy(dataset);
  spdlog::info("data: {} train / {} validation tokens, vocab {}, unigram entropy {:.3f} nats/token",
               dataset.train_tokens, dataset.val_tokens, dataset.vocab_size, result.unigram_entropy);

  const GptConfig model_config = gpt_config_from(config, dataset.vocab_size);
  GptModel model(model_config);
  model.initialize(seed);
  model.to(device);
  const DType dtype = dtype_from_name(config.get_string("model.dtype"));
  spdlog::info("model: {} parameters, {} layers x {} wide, context {}, on {} ({})", model.parameter_count(),
               model_config.n_layer, model_config.n_embd, model_config.block_size, device.str(), dtype_name(dtype));

  optim::AdamWOptions adam{config.get_double("optim.beta1"), config.get_double("optim.beta2"),
                           config.get_double("optim.eps")};
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), config.get_double("optim.weight_decay")), adam);
  const optim::LrSchedule schedule = lr_schedule_from(config);

  const int64_t batch_size = config.get_int("train.batch_size"), seq_len = config.get_int("train.seq_len");
  const int64_t grad_accum = config.get_int("train.grad_accum"), total_steps = config.get_int("train.steps");
  const int ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
  data::TokenLoader train_loader(dataset.train_shards, dataset.vocab_size,
                                 {batch_size, seq_len, data::LoaderMode::kTrain, seed, 0, 1, 0});
  data::TokenLoader val_loader(
      dataset.val_shards, dataset.vocab_size,
      {batch_size, seq_len, data::LoaderMode::kEval, seed, 0, 1, config.get_int("train.eval_batches")});

  int64_t step = 0;
  if (resume) {
    auto latest = latest_checkpoint(result.run_dir);
    RETORT_INPUT_CHECK(latest.has_value(), "--resume: {} has no checkpoint yet; run without --resume to start",
                       result.run_dir.string());
    const nlohmann::json state = load_checkpoint(*latest, model, optimizer);
    step = state.at("step").get<int64_t>();
    train_loader.restore(state.at("train_loader").get<data::LoaderState>());
    spdlog::info("resumed from {} at step {}", latest->string(), step);
  }
  write_text_atomic(result.run_dir / "config.yaml", config.to_yaml(true));
  MetricsWriter metrics = resume ? MetricsWriter::resume(result.run_dir / "metrics.jsonl", step)
                                 : MetricsWriter::create(result.run_dir / "metrics.jsonl");

  const int64_t eval_every = config.get_int("train.eval_every");
  const int64_t checkpoint_every = config.get_int("train.checkpoint_every");
  const int keep = static_cast<int>(config.get_int("train.keep_checkpoints"));
  const int64_t inject_nan_at = config.get_int("train.inject_nan_at_step");
  const double grad_clip = config.get_double("optim.grad_clip");
  const int64_t tokens_per_step = batch_size * seq_len * grad_accum;
  auto trainer_state = [&] { return nlohmann::json{{"train_loader", train_loader.state()}, {"seed", seed}}; };
  std::optional<fs::path> last_checkpoint = latest_checkpoint(result.run_dir);

  ProgressOptions progress_options;
  progress_options.label = "train";
  progress_options.total_steps = total_steps;
  progress_options.start_step = step;
  progress_options.log_every = config.get_int("train.log_every");
  ProgressReporter progress(progress_options);
  const auto run_start = std::chrono::steady_clock::now();
  int64_t tokens_this_run = 0;

  while (step < total_steps) {
    const auto step_start = std::chrono::steady_clock::now();
    double step_loss = 0;
    for (int64_t micro = 0; micro < grad_accum; ++micro) {
      Batch b = to_device(train_loader.next(), device);
      Tensor logits = model.forward(b.inputs, dtype);
      Tensor loss = ops::cross_entropy(logits, b.targets.to(device), ignore_index);
      double value = loss.item();
      if (step == inject_nan_at) value = std::nan("");
      if (!std::isfinite(value)) {
        progress.finish();
        throw Error(fmt::format(
            "training loss is {} at step {} (micro-batch {}): stopping without saving this step. The last good "
            "checkpoint is {}. Lower optim.lr, raise optim.warmup_steps or keep optim.grad_clip on, then resume "
            "with --resume",
            value, step + 1, micro, last_checkpoint ? last_checkpoint->string() : std::string("(none yet)")));
      }
      step_loss += value / static_cast<double>(grad_accum);
      (grad_accum == 1 ? loss : ops::scale(loss, 1.0 / static_cast<double>(grad_accum))).backward();
    }
    const double grad_norm = optim::clip_grad_norm(model.parameters(), grad_clip);
    const double lr = schedule.at(step);
    optimizer.step(lr);
    optimizer.zero_grad();
    ++step;
    tokens_this_run += tokens_per_step;
    result.train_losses.push_back(step_loss);

    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    nlohmann::json record{{"loss", step_loss},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_s", static_cast<double>(tokens_per_step) / step_seconds},
                          {"tokens", step * tokens_per_step}};
    if ((eval_every > 0 && step % eval_every == 0) || step == total_steps) {
      const double eval_loss = evaluate(model, val_loader, dtype, device, ignore_index);
      record["eval_loss"] = eval_loss;
      record["eval_ppl"] = std::exp(eval_loss);
      result.final_eval_loss = eval_loss;
      progress.log(
          fmt::format("step {}: validation loss {:.4f}, perplexity {:.1f}", step, eval_loss, std::exp(eval_loss)));
    }
    metrics.write(step, record);
    progress.update({step, step_loss, lr, tokens_per_step, {{"gnorm", grad_norm}}});
    if ((checkpoint_every > 0 && step % checkpoint_every == 0) || step == total_steps)
      last_checkpoint = save_checkpoint(result.run_dir, step, model, optimizer, trainer_state(), keep);
  }
  progress.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  result.steps = step;
  result.tokens_per_second = seconds > 0 ? static_cast<double>(tokens_this_run) / seconds : 0;
  return result;
}

}  // namespace retort::apps
