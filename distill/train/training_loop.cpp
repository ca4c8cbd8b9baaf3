#include "distill/train/training_loop.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/data/token_stats.h"
#include "core/io/atomic_file.h"
#include "core/ops/ops.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "core/util/progress.h"
#include "distill/train/checkpoint.h"
#include "distill/train/checkpoint_integrity.h"
#include "distill/train/config_builders.h"
#include "distill/train/data_position.h"
#include "distill/train/evaluation.h"
#include "distill/train/graphed_train_step.h"
#include "distill/train/labels_objective.h"
#include "distill/train/nonfinite_loss.h"
#include "distill/train/run_metrics_log.h"
#include "distill/train/run_tokenizer.h"
#include "losses/cross_entropy.h"
#include "optim/adamw/adamw.h"
#include "optim/grad_clip.h"
#include "parallel/data_parallel.h"
#include "parallel/launch/distributed_run.h"
#include "parallel/models/gpt_model.h"
#include "parallel/models/hf_checkpoint.h"

namespace retort::distill {

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

// The mean of a per-rank value over the dp group (every rank gets it; a no-op without data parallelism).
double dp_mean(double value, const ProcessGrid& grid, Device device) {
  if (grid.dp_size == 1) return value;
  Tensor t = Tensor::scalar(value, device.is_cpu() ? DType::F64 : DType::F32, device);
  grid.dp->all_reduce(t, ReduceOp::Sum);
  return t.item() / grid.dp_size;
}

// The graphed step when train.cuda_graphs and the run allow it (graphed_train_step.h), else null.
std::unique_ptr<GraphedTrainStep> graphed_step_for(const ResolvedConfig& config, const TrainingObjective& objective,
                                                   optim::Optimizer& optimizer, GptModel& model,
                                                   const ProcessGrid& grid, Device device) {
  const std::string mode = config.get_string("train.cuda_graphs");
  if (mode == "off") return nullptr;
  std::shared_ptr<const GraphableLoss> loss = objective.graphable_loss();
  auto* adamw = dynamic_cast<optim::AdamW*>(&optimizer);
  const std::optional<std::string> refusal =
      graphed_step_refusal(device, grid.tp_size, grid.dp_size, adamw ? "adamw" : optimizer.name(), loss != nullptr);
  if (refusal) {
    if (mode == "on") spdlog::warn("train.cuda_graphs=on: {}: every step runs without CUDA graphs", *refusal);
    return nullptr;
  }
  GraphedStepOptions options;
  options.batch = config.get_int("train.batch_size");
  options.seq = config.get_int("train.seq_len");
  options.grad_accum = config.get_int("train.grad_accum");
  options.max_norm = config.get_double("optim.grad_clip");
  options.compute_dtype = dtype_from_name(config.get_string("model.dtype"));
  options.loss = std::move(loss);
  return std::make_unique<GraphedTrainStep>(model, *adamw, options, device);
}

}  // namespace

TrainResult run_training(const ResolvedConfig& config, Device requested_device, RunStart start,
                         TrainingObjective& objective) {
  const DistributedRun dist = start_distributed_run(requested_device, static_cast<int>(config.get_int("parallel.tp")),
                                                    comm_timeout_from(config));
  const ProcessGrid& grid = dist.grid;
  const Device device = dist.device;
  const bool main = dist.is_main();
  // Logs come from rank 0; the others speak only of warnings and errors.
  if (!main) spdlog::set_level(spdlog::level::warn);

  TrainResult result;
  result.main_rank = main;
  result.run_dir = config.get_string("run.dir");
  // Before the data or the model: a refused folder costs nothing and loses nothing.
  prepare_run_folder_on_ranks(result.run_dir, start, training_run_outputs(), distill_run_results(), dist);
  const bool resume = start == RunStart::kResume;
  // One rank tidies what an interrupted save left; then every rank picks the same intact checkpoint.
  if (resume && main) clean_interrupted_saves(result.run_dir);
  if (resume) dist.barrier();
  const std::optional<fs::path> resume_from = resume ? checkpoint_to_resume(result.run_dir) : std::nullopt;
  RETORT_INPUT_CHECK(!resume || resume_from.has_value(),
                     "--resume: {} has no checkpoint yet, so there is nothing to continue: run without --resume to "
                     "start it (with --overwrite instead if the folder holds an earlier attempt)",
                     result.run_dir.string());
  if (main) fs::create_directories(result.run_dir);
  const uint64_t seed = static_cast<uint64_t>(config.get_int("run.seed"));

  const data::DatasetOptions data_options = dataset_options_from(config);
  // Rank 0 builds (or checks) the tokenizer and shards; the others then find them cached.
  if (!main) dist.barrier();
  const data::PreparedDataset dataset = data::prepare_token_dataset(data_options);
  if (main) dist.barrier();
  if (main) {
    keep_run_tokenizer(result.run_dir, dataset, resume);
    result.unigram_entropy = training_unigram_entropy(dataset);
  }
  spdlog::info("data: {} train / {} validation tokens, vocab {}, unigram entropy {:.3f} nats/token",
               dataset.train_tokens, dataset.val_tokens, dataset.vocab_size, result.unigram_entropy);

  const GptConfig model_config = gpt_config_from(config, dataset.vocab_size);
  GptModel model(model_config, grid.tp);
  // Fine-tuning starts from the Hugging Face weights (each rank reading its own slices), a new model from the seed.
  if (const std::string from = config.get_string("model.from"); !from.empty())
    load_hf_weights(model, from);
  else
    model.initialize(seed);
  model.to(device);
  const DType dtype = dtype_from_name(config.get_string("model.dtype"));
  spdlog::info("model: {} parameters{}, {} layers x {} wide, context {}, on {} ({})", model.parameter_count(),
               grid.tp_size > 1 ? fmt::format(" on each of {} tp ranks", grid.tp_size) : "", model_config.n_layer,
               model_config.n_embd, model_config.block_size, device.str(), dtype_name(dtype));

  const std::unique_ptr<optim::Optimizer> optimizer_owner = optimizer_from(config, model.named_parameters(), grid.tp);
  optim::Optimizer& optimizer = *optimizer_owner;
  const optim::LrSchedule schedule = lr_schedule_from(config);

  const int64_t batch_size = config.get_int("train.batch_size"), seq_len = config.get_int("train.seq_len");
  const int64_t grad_accum = config.get_int("train.grad_accum"), total_steps = config.get_int("train.steps");
  const int ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
  objective.prepare(RunContext{device, dtype, grid.tp, grid.dp_size > 1 ? grid.dp : nullptr, &config, &dataset});
  // Each dp rank reads its own share of every epoch; the tp ranks of one dp rank read the same batches.
  data::TokenLoader train_loader(dataset.train_shards, dataset.vocab_size,
                                 {batch_size, seq_len, data::LoaderMode::kTrain, seed, grid.dp_rank, grid.dp_size, 0});
  // Without a validation split (data.val_fraction 0, or data.shards without data.val_shards) nothing is validated.
  std::optional<data::TokenLoader> val_loader;
  if (!dataset.val_shards.empty()) {
    val_loader.emplace(dataset.val_shards, dataset.vocab_size,
                       data::TokenLoaderOptions{batch_size, seq_len, data::LoaderMode::kEval, seed, 0, 1,
                                                config.get_int("train.eval_batches")});
  } else {
    result.final_eval_loss = std::nan("");
    spdlog::info(
        "data: no validation split (data.val_fraction = 0 or no data.val_shards): training without "
        "validation");
  }

  CheckpointShard shard;
  shard.tp_rank = grid.tp_rank;
  shard.tp_size = grid.tp_size;
  shard.writes = grid.dp_rank == 0;
  shard.main = main;
  if (dist.host_world) shard.barrier = [&dist] { dist.barrier(); };

  int64_t step = 0;
  if (resume) {
    const auto& latest = resume_from;
    const nlohmann::json state = load_checkpoint(*latest, model, optimizer, shard);
    step = state.at("step").get<int64_t>();
    const int saved_dp = state.value("dp", 1);
    RETORT_INPUT_CHECK(saved_dp == grid.dp_size,
                       "checkpoint {} was written by {} data-parallel ranks but this run has {}: resume with the same "
                       "number of ranks",
                       latest->string(), saved_dp, grid.dp_size);
    train_loader.restore(loader_position_of(state, grid));
    spdlog::info("resumed from {} at step {}", latest->string(), step);
  }
  std::optional<RunMetricsLog> metrics;
  if (main) {
    write_text_atomic(result.run_dir / "config.yaml", config.to_yaml(true));
    write_text_atomic(result.run_dir / "objective.json", objective.description().dump(2) + "\n");
    metrics.emplace(resume ? RunMetricsLog::resume(result.run_dir, step) : RunMetricsLog::create(result.run_dir));
  }

  const int64_t eval_every = config.get_int("train.eval_every");
  const int64_t checkpoint_every = config.get_int("train.checkpoint_every");
  const int keep = static_cast<int>(config.get_int("train.keep_checkpoints"));
  const double grad_clip = config.get_double("optim.grad_clip");
  const int64_t tokens_per_step = batch_size * seq_len * grad_accum * grid.dp_size;  // over all dp ranks
  auto trainer_state = [&] {
    nlohmann::json state = gather_loader_positions(train_loader, dist);
    state["seed"] = seed;
    state["dp"] = grid.dp_size;
    return state;
  };
  NonFiniteLossPolicy nonfinite;
  nonfinite.inject_nan_at_step = config.get_int("train.inject_nan_at_step");
  nonfinite.injected_loss = std::stod(config.get_string("train.inject_loss_value"));
  std::optional<fs::path> last_checkpoint = latest_checkpoint(result.run_dir);
  const std::unique_ptr<GraphedTrainStep> graphed = graphed_step_for(config, objective, optimizer, model, grid, device);

  ProgressOptions progress_options;
  progress_options.label = objective.progress_label();
  progress_options.total_steps = total_steps;
  progress_options.start_step = step;
  progress_options.log_every = config.get_int("train.log_every");
  if (!main) progress_options.mode = ProgressMode::Lines;  // and its lines are below the log level
  ProgressReporter progress(progress_options);
  const auto run_start = std::chrono::steady_clock::now();
  int64_t tokens_this_run = 0;

  while (step < total_steps) {
    const auto step_start = std::chrono::steady_clock::now();
    double step_loss = 0;
    std::map<std::string, double> step_metrics;
    std::string batch_kind;
    for (int64_t micro = 0; micro < grad_accum; ++micro) {
      data::TokenBatch host_batch = train_loader.next();
      objective.choose_batch(step, model, dtype, host_batch);
      if (graphed) {
        // The metrics are the eager objective's; the backward has already run, but nothing is updated before the
        // check below.
        const double value = nonfinite.observe(graphed->micro_batch(host_batch), step);
        if (!std::isfinite(value)) {
          progress.finish();
          throw nonfinite.stop(value, step, micro, last_checkpoint);
        }
        for (const auto& [name, metric] : graphed->last_metrics())
          step_metrics[name] += metric / static_cast<double>(grad_accum);
        step_loss += value / static_cast<double>(grad_accum);
        continue;
      }
      const Tensor inputs = Tensor::from_ints(host_batch.inputs, {host_batch.batch, host_batch.seq}, device);
      Tensor logits = model.forward(inputs, dtype);
      ObjectiveLoss micro_loss = objective.micro_batch_loss(logits, host_batch);
      Tensor& loss = micro_loss.loss;
      batch_kind = objective.batch_kind();
      for (const auto& [name, value] : micro_loss.metrics)
        step_metrics[name] += dp_mean(value, grid, device) / static_cast<double>(grad_accum);
      // Every rank decides on the same value, so a NaN on one dp rank stops them all at the same step.
      const double value = nonfinite.observe(dp_mean(loss.item(), grid, device), step);
      if (!std::isfinite(value)) {
        progress.finish();
        throw nonfinite.stop(value, step, micro, last_checkpoint);
      }
      step_loss += value / static_cast<double>(grad_accum);
      (grad_accum == 1 ? loss : ops::scale(loss, 1.0 / static_cast<double>(grad_accum))).backward();
    }
    const double lr = schedule.at(step);
    double grad_norm = 0;
    if (graphed) {
      grad_norm = graphed->update(lr);
    } else {
      average_gradients(model.parameters(), grid.dp);
      grad_norm = optim::clip_grad_norm(model.parameters(), grad_clip);
      optimizer.step(lr);
      optimizer.zero_grad();
    }
    ++step;
    tokens_this_run += tokens_per_step;
    result.train_losses.push_back(step_loss);

    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    nlohmann::json record{{"loss", step_loss},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_s", static_cast<double>(tokens_per_step) / step_seconds},
                          {"tokens", step * tokens_per_step}};
    for (const auto& [name, value] : step_metrics) record[name] = value;
    if (!batch_kind.empty()) record["batch_kind"] = batch_kind;
    if (val_loader && ((eval_every > 0 && step % eval_every == 0) || step == total_steps)) {
      BatchEvalOptions validation;
      validation.ignore_index = ignore_index;
      validation.teacher = objective.validation_teacher();
      const EvalReport eval = evaluate_batches(model, dtype, *val_loader, validation);
      const double eval_loss = eval.loss;
      record["eval_loss"] = eval_loss;
      record["eval_ppl"] = std::exp(eval_loss);
      if (eval.kl_to_teacher) {
        record["eval_kl_to_teacher"] = *eval.kl_to_teacher;
        record["eval_top1_agreement"] = *eval.top1_agreement;
      }
      std::string objective_part;
      for (const auto& [name, value] : objective.validation_metrics(model, dtype)) {
        record[name] = value;
        objective_part += fmt::format(", {} {:.4f}", name, value);
      }
      result.final_eval_loss = eval_loss;
      progress.log(fmt::format("step {}: validation loss {:.4f}, perplexity {:.1f}{}{}", step, eval_loss,
                               std::exp(eval_loss),
                               eval.kl_to_teacher ? fmt::format(", KL to the teacher {:.4f}, top-1 agreement {:.1f}%",
                                                                *eval.kl_to_teacher, 100 * *eval.top1_agreement)
                                                  : "",
                               objective_part));
    }
    if (metrics) metrics->write(step, record);
    progress.update({step, step_loss, lr, tokens_per_step, {{"gnorm", grad_norm}}});
    if ((checkpoint_every > 0 && step % checkpoint_every == 0) || step == total_steps)
      last_checkpoint = save_checkpoint(result.run_dir, step, model, optimizer, trainer_state(), keep, shard);
  }
  progress.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  result.steps = step;
  result.tokens_per_second = seconds > 0 ? static_cast<double>(tokens_this_run) / seconds : 0;
  return result;
}

TrainResult run_label_training(const ResolvedConfig& config, Device device, RunStart start) {
  LabelsObjective labels;
  return run_training(config, device, start, labels);
}

}  // namespace retort::distill
