#include "apps/distill_trainer.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "apps/distill_config.h"
#include "parallel/launch/distributed_run.h"
#include "apps/train_config.h"
#include "apps/trained_model.h"
#include "core/autograd/grad_mode.h"
#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"
#include "core/ops/ops.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"

namespace retort::apps {

namespace fs = std::filesystem;

namespace {

// The teacher and temperature a cache was written with, next to its shards (the shard header has no room for
// them); a student at another temperature would read the teacher at the wrong temperature.
constexpr const char* kCacheInfoFile = "teacher.json";

nlohmann::json read_cache_info(const fs::path& directory) {
  const fs::path file = directory / kCacheInfoFile;
  RETORT_INPUT_CHECK(fs::exists(file),
                     "the top-k cache '{}' has no {}: write it with `retort distill topk` (or delete the folder)",
                     directory.string(), kCacheInfoFile);
  try {
    return nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(
        fmt::format("{} is not valid JSON ({}): delete the cache and write it again", file.string(), e.what()));
  }
}

}  // namespace

distill::DatasetIdentity token_stream_identity(const std::vector<fs::path>& shards, int64_t vocab_size) {
  distill::DatasetHasher hasher;
  std::vector<int32_t> chunk;
  constexpr int64_t kChunk = 1 << 20;
  for (const fs::path& path : shards) {
    const data::TokenShard shard = data::TokenShard::open(path, vocab_size);
    for (int64_t p = 0; p < shard.size(); p += kChunk) {
      chunk.resize(static_cast<size_t>(std::min(kChunk, shard.size() - p)));
      shard.copy_to(p, chunk);
      hasher.update(chunk);
    }
  }
  return hasher.identity();
}

distill::TopKCacheReader open_matching_cache(const fs::path& directory, const CacheRequirements& need) {
  RETORT_INPUT_CHECK(fs::is_directory(directory),
                     "the top-k cache '{}' does not exist: write it first with `retort distill topk --config ...` "
                     "(or set distill.cache_dir)",
                     directory.string());
  const nlohmann::json info = read_cache_info(directory);
  const double cached_temperature = info.value("temperature", 1.0);
  RETORT_INPUT_CHECK(cached_temperature == need.temperature,
                     "the top-k cache '{}' was written at temperature {} but distill.temperature is {}: write a cache "
                     "at this temperature (another distill.cache_dir) or set distill.temperature={}",
                     directory.string(), cached_temperature, need.temperature, cached_temperature);
  distill::TopKCacheExpectation expect;
  expect.tokenizer_id = need.tokenizer_id;
  expect.dataset = need.dataset;
  distill::TopKCacheReader reader = distill::TopKCacheReader::open(directory, expect);
  RETORT_INPUT_CHECK(reader.k() == need.k,
                     "the top-k cache '{}' holds k = {} entries per token, the run asks for k = {}: set distill.k={} "
                     "or write a cache with k = {} into another distill.cache_dir",
                     directory.string(), reader.k(), need.k, reader.k(), need.k);
  RETORT_INPUT_CHECK(reader.spec().vocab == need.vocab_size,
                     "the top-k cache '{}' was written over a vocabulary of {} but the student's is {}: write the "
                     "cache with a teacher of the student's tokenizer",
                     directory.string(), reader.spec().vocab, need.vocab_size);
  return reader;
}

losses::TopkTargets cache_targets_for_batch(const distill::TopKCacheReader& cache, const data::TokenBatch& batch) {
  const int64_t B = batch.batch, T = batch.seq, k = cache.k();
  RETORT_CHECK(static_cast<int64_t>(batch.window_starts.size()) == B,
               "the batch has {} window positions for {} rows: it must come from a TokenLoader",
               batch.window_starts.size(), B);
  losses::TopkTargets targets;
  targets.indices = Tensor::empty({B, T, k}, DType::I32);
  targets.logprobs = Tensor::empty({B, T, k}, DType::F32);
  targets.mask = Tensor::full({B, T}, 1.0, DType::I32);
  int32_t* indices = targets.indices.data<int32_t>();
  float* logprobs = targets.logprobs.data<float>();
  int32_t* mask = targets.mask.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = batch.window_starts[static_cast<size_t>(b)];
    const int64_t covered = std::clamp<int64_t>(cache.tokens() - start, 0, T);
    if (covered > 0) cache.read_rows(start, covered, indices + b * T * k, logprobs + b * T * k);
    // Past the cache (the end of a split that is not a multiple of T): masked rows with distinct placeholder ids.
    for (int64_t t = covered; t < T; ++t) {
      mask[b * T + t] = 0;
      for (int64_t j = 0; j < k; ++j) {
        indices[(b * T + t) * k + j] = static_cast<int32_t>(j);
        logprobs[(b * T + t) * k + j] = -std::log(static_cast<float>(k));
      }
    }
  }
  targets.labels = Tensor::from_ints(batch.targets, {B, T});
  return targets;
}

namespace {

// The labels' plain cross-entropy of the logits, reported next to the KD loss (no tape, no smoothing).
double plain_cross_entropy(const Tensor& logits, const Tensor& labels, int ignore_index) {
  NoGradGuard no_grad;
  losses::CrossEntropyOptions plain;
  plain.ignore_index = ignore_index;
  return losses::cross_entropy(logits, labels, plain).item();
}

LossFactory cache_loss(const ResolvedConfig& config) {
  return [&config](const LossContext& context) -> MicroBatchLossFn {
    const data::PreparedDataset& dataset = *context.dataset;
    CacheRequirements need;
    need.k = static_cast<int>(config.get_int("distill.k"));
    need.tokenizer_id = dataset.tokenizer_fingerprint;
    need.vocab_size = dataset.vocab_size;
    need.dataset = token_stream_identity(dataset.train_shards, dataset.vocab_size);
    need.temperature = config.get_double("distill.temperature");
    auto cache = std::make_shared<distill::TopKCacheReader>(open_matching_cache(cache_dir(config), need));
    spdlog::info("distill: top-k cache '{}' ({} tokens, k = {}, {})", cache_dir(config).string(), cache->tokens(),
                 cache->k(), distill::cache_value_type_name(cache->spec().value_type));
    losses::TopkDistillationOptions options = topk_loss_options_from(config);
    options.group = context.tp_group;
    const Device device = context.device;
    return [cache, options, device](const Tensor& logits, const data::TokenBatch& batch) {
      losses::TopkTargets targets = cache_targets_for_batch(*cache, batch);
      const double ce = plain_cross_entropy(logits, targets.labels.to(device), options.ignore_index);
      Tensor loss = losses::topk_distillation_loss(logits, targets, options);
      const double value = loss.item();
      // The KD part alone: the mix is kd_ratio x KD + (1 - kd_ratio) x CE (CE without masking differences: the
      // cache covers the rows the CE counts except at a split's very end).
      const double kd = options.kd_ratio > 0 ? (value - (1 - options.kd_ratio) * ce) / options.kd_ratio : 0.0;
      return MicroBatchLoss{loss, {{"ce", ce}, {"kd", kd}}};
    };
  };
}

LossFactory online_loss(const ResolvedConfig& config) {
  return [&config](const LossContext& context) -> MicroBatchLossFn {
    auto teacher =
        std::make_shared<TrainedModel>(load_trained_model(teacher_run_dir(config), context.device, context.tp_group));
    check_same_tokenizer(*teacher, context.dataset->tokenizer_fingerprint, context.dataset->vocab_size, "teacher");
    spdlog::info("distill: online teacher {} (step {})", teacher->checkpoint.string(), teacher->step);
    losses::DistributionLossOptions options;
    options.divergence = losses::Divergence::ForwardKL;
    options.temperature = config.get_double("distill.temperature");
    options.ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
    options.group = context.tp_group;
    const double kd_ratio = config.get_double("distill.kd_ratio");
    const Device device = context.device;
    return [teacher, options, kd_ratio, device](const Tensor& logits, const data::TokenBatch& batch) {
      const Tensor tokens = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
      const Tensor labels = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
      const Tensor teacher_logits = inference_logits(*teacher, tokens);
      Tensor kd = losses::distribution_loss(logits, teacher_logits, labels, options);
      const double kd_value = kd.item();
      if (kd_ratio >= 1) {
        return MicroBatchLoss{kd,
                              {{"ce", plain_cross_entropy(logits, labels, options.ignore_index)}, {"kd", kd_value}}};
      }
      // The labels' cross-entropy is both a term of the loss and the reported metric: computed once.
      losses::CrossEntropyOptions plain;
      plain.ignore_index = options.ignore_index;
      const Tensor ce = losses::cross_entropy(logits, labels, plain);
      const double ce_value = ce.item();
      Tensor loss = ops::add(ops::scale(kd, kd_ratio), ops::scale(ce, 1 - kd_ratio));
      return MicroBatchLoss{loss, {{"ce", ce_value}, {"kd", kd_value}}};
    };
  };
}

}  // namespace

TrainResult run_distill_training(const ResolvedConfig& config, Device device, bool resume) {
  TrainingHooks hooks;
  hooks.progress_label = "distill";
  hooks.loss = distill_mode_from(config) == DistillMode::kOnline ? online_loss(config) : cache_loss(config);
  return run_training(config, device, resume, hooks);
}

distill::TeacherTopKReport write_teacher_cache(const ResolvedConfig& config, Device requested_device) {
  const DistributedRun dist = start_distributed_run(requested_device, static_cast<int>(config.get_int("parallel.tp")));
  RETORT_INPUT_CHECK(dist.grid.dp_size == 1,
                     "retort distill topk runs one tensor-parallel group: launch exactly parallel.tp ranks (got {} "
                     "ranks for parallel.tp = {})",
                     dist.env.world_size, dist.grid.tp_size);
  const bool main = dist.is_main();
  if (!main) dist.barrier();
  const data::PreparedDataset dataset = data::prepare_token_dataset(dataset_options_from(config));
  if (main) dist.barrier();

  const TrainedModel teacher = load_trained_model(teacher_run_dir(config), dist.device, dist.grid.tp);
  check_same_tokenizer(teacher, dataset.tokenizer_fingerprint, dataset.vocab_size, "teacher");
  const int64_t seq_len = config.get_int("train.seq_len");
  RETORT_INPUT_CHECK(seq_len <= teacher.model->config().block_size,
                     "train.seq_len = {} is longer than the teacher's context ({}): lower train.seq_len", seq_len,
                     teacher.model->config().block_size);

  const fs::path directory = cache_dir(config);
  const double temperature = config.get_double("distill.temperature");
  if (main) {
    fs::create_directories(directory);
    if (fs::exists(directory / kCacheInfoFile)) {
      const double cached = read_cache_info(directory).value("temperature", 1.0);
      RETORT_INPUT_CHECK(cached == temperature,
                         "the folder '{}' holds a cache at temperature {}, not {}: use another distill.cache_dir or "
                         "delete it",
                         directory.string(), cached, temperature);
    }
    const nlohmann::json info{{"temperature", temperature},
                              {"teacher", teacher.run_dir.string()},
                              {"checkpoint", teacher.checkpoint.string()},
                              {"seq_len", seq_len}};
    write_text_atomic(directory / kCacheInfoFile, info.dump(2));
  }

  distill::TeacherTopKOptions options;
  options.k = static_cast<int>(config.get_int("distill.k"));
  options.dtype = distill::cache_value_type_from_name(config.get_string("distill.cache_dtype"));
  options.batch_size = config.get_int("distill.topk_batch_size");
  options.seq_len = seq_len;
  options.output_dir = directory;
  options.temperature = temperature;
  options.tokenizer_id = dataset.tokenizer_fingerprint;
  options.vocab = dataset.vocab_size;
  options.device = dist.device;
  options.group = dist.grid.tp;
  const auto forward = [&teacher](const Tensor& tokens) { return inference_logits(teacher, tokens); };
  return distill::generate_teacher_topk(forward, {dataset.train_shards, dataset.vocab_size}, options);
}

}  // namespace retort::apps
