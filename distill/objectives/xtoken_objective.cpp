#include "distill/objectives/xtoken_objective.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/ops/ops.h"
#include "core/util/error.h"
#include "distill/cache/cache_targets.h"
#include "distill/distill_config.h"
#include "distill/train/plain_cross_entropy.h"
#include "distill/xtoken/common_ids.h"
#include "distill/xtoken/vocab_projection_file.h"
#include "parallel/tp/vocab_topk.h"

namespace retort::distill {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Every rank of the run has passed this point once the first has (an all-reduce over each group: a rank of another
// tp index waits on the dp ranks of its own, which wait on theirs, so all of them wait on the first).
void barrier(const std::shared_ptr<Communicator>& dp, const std::shared_ptr<Communicator>& tp, Device device) {
  for (const auto& group : {dp, tp})
    if (group && group->size() > 1) {
      Tensor token = Tensor::scalar(1.0, device.is_cpu() ? DType::F64 : DType::F32, device);
      group->all_reduce(token, ReduceOp::Sum);
    }
}

}  // namespace

void CrossTokenizerObjective::prepare(const RunContext& run) {
  const ResolvedConfig& config = *run.config;
  const data::PreparedDataset& dataset = *run.dataset;
  RETORT_INPUT_CHECK(dataset.tokenizer_fingerprint != data::kNoTokenizerFingerprint && !dataset.tokenizer_path.empty(),
                     "distill.xtoken.enabled needs the student's tokenizer to turn its tokens into text, but the data "
                     "are pre-tokenized shards without one: give data.tokenizer");
  device_ = run.device;
  tp_group_ = run.tp_group;
  dp_group_ = run.dp_group;
  k_ = static_cast<int>(config.get_int("distill.k"));
  min_coverage_ = config.get_double("distill.xtoken.min_coverage");
  const bool online = distill_mode_from(config) == DistillMode::kOnline;
  const std::filesystem::path teacher_dir = teacher_run_dir(config);

  const data::Tokenizer student_tokenizer = data::Tokenizer::load(dataset.tokenizer_path);
  int64_t teacher_model_vocab = 0;
  std::optional<data::Tokenizer> teacher_tokenizer;
  if (online) {
    teacher_ = std::make_unique<TrainedModel>(load_trained_model(teacher_dir, run.device, run.tp_group));
    teacher_tokenizer.emplace(load_run_tokenizer(*teacher_));
    teacher_model_vocab = teacher_->vocab_size;
    teacher_context_ = teacher_->model->config().block_size;
    spdlog::info("distill: online cross-tokenizer teacher {} (step {})", teacher_->checkpoint.string(), teacher_->step);
  } else {
    teacher_tokenizer.emplace(load_run_tokenizer(teacher_dir));
    // The cache has a row for every teacher position: a row is as long as the student window's text makes it.
    teacher_context_ = std::numeric_limits<int32_t>::max();
  }
  if (teacher_tokenizer->fingerprint() == student_tokenizer.fingerprint())
    spdlog::warn(
        "distill: distill.xtoken.enabled with a teacher of the student's own tokenizer ({}): the chunks are "
        "single tokens; distill.xtoken.enabled=false gives the exact per-token objectives",
        student_tokenizer.fingerprint());

  const std::filesystem::path dir = xtoken_dir(config);
  // The first rank makes the paired stream and the projection when they are missing; the others then read them.
  const bool first = (!tp_group_ || tp_group_->rank() == 0) && (!dp_group_ || dp_group_->rank() == 0);
  const xtoken::PairedStreamRequest request{
      dir, dataset.train_shards, dataset.val_shards, dataset.vocab_size, &student_tokenizer, &*teacher_tokenizer};
  if (first) stream_ = xtoken::load_or_build_paired_stream(request);
  barrier(dp_group_, tp_group_, run.device);
  if (!first) stream_ = xtoken::load_or_build_paired_stream(request);
  student_texts_ = xtoken::token_texts(student_tokenizer);
  teacher_texts_ = xtoken::token_texts(*teacher_tokenizer);

  const double temperature = config.get_double("distill.temperature");
  if (!online) {
    const std::filesystem::path cache = cache_dir(config);
    RETORT_INPUT_CHECK(std::filesystem::is_directory(cache),
                       "the teacher's top-k cache '{}' does not exist: `retort distill run` writes it over the "
                       "teacher's paired stream, or use distill.mode=online",
                       cache.string());
    const double cached_temperature = read_cache_info(cache).value("temperature", 1.0);
    RETORT_INPUT_CHECK(cached_temperature == temperature,
                       "the top-k cache '{}' was written at temperature {} but distill.temperature is {}: write a "
                       "cache at this temperature (another distill.cache_dir) or set distill.temperature={}",
                       cache.string(), cached_temperature, temperature, cached_temperature);
    TopKCacheExpectation expect;
    expect.k = k_;
    expect.tokenizer_id = teacher_tokenizer->fingerprint();
    expect.dataset = dataset_identity(stream_.train.teacher_tokens);
    cache_.emplace(TopKCacheReader::open(cache, expect));
    teacher_model_vocab = cache_->spec().vocab;
    spdlog::info("distill: cross-tokenizer top-k cache '{}' ({} teacher tokens, k = {})", cache.string(),
                 cache_->tokens(), cache_->k());
  }
  RETORT_INPUT_CHECK(teacher_model_vocab >= teacher_tokenizer->vocab_size(),
                     "the teacher's model has {} ids but its tokenizer {}: give the teacher's run folder",
                     teacher_model_vocab, teacher_tokenizer->vocab_size());
  // The projection, chunk ids and cache rows stay on the host: the loss builds its chunk index there.
  // A damaged projection file in this folder of ours is made again.
  const auto projection = [&] {
    return xtoken::load_or_build_projection(student_tokenizer, *teacher_tokenizer, dataset.vocab_size,
                                            teacher_model_vocab, dir / xtoken::kVocabProjectionFile, {},
                                            xtoken::InvalidProjectionFile::kRebuild);
  };
  std::optional<xtoken::StudentTeacherProjection> built;
  if (first) built.emplace(projection());
  barrier(dp_group_, tp_group_, run.device);
  if (!first) built.emplace(projection());
  projection_ = built->matrix;
  spdlog::info("distill: vocabulary projection {}: {}", (dir / xtoken::kVocabProjectionFile).string(),
               xtoken::describe(built->report));

  const std::string loss = config.get_string("distill.xtoken.loss");
  options_.kind = loss == "gold" ? losses::ChunkLossKind::kGold : losses::ChunkLossKind::kChunkKL;
  options_.temperature = temperature;
  options_.kd_ratio = config.get_double("distill.kd_ratio");
  options_.dynamic_ce_scaling = config.get_bool("distill.xtoken.dynamic_ce_scaling");
  options_.ignore_index = static_cast<int>(config.get_int("loss.ignore_index"));
  options_.group = run.tp_group;
  if (options_.kind == losses::ChunkLossKind::kGold) {
    // The strict pairs (one entry of weight 1, one student id per teacher id): xtoken/common_ids.h.
    common_ = losses::common_ids_from_pairs(xtoken::common_ids(*built).strict);
    spdlog::info("distill: gold loss over {} exactly mapped ids of the student's {}", common_.student_ids.numel(),
                 dataset.vocab_size);
  }
  description_ = {{"name", "xtoken"},
                  {"loss", loss},
                  {"teacher_signal", online ? "online" : "topk_cache"},
                  {"k", k_},
                  {"temperature", temperature},
                  {"kd_ratio", options_.kd_ratio},
                  {"dynamic_ce_scaling", options_.dynamic_ce_scaling},
                  {"student_tokenizer", student_tokenizer.fingerprint()},
                  {"teacher_tokenizer", teacher_tokenizer->fingerprint()},
                  {"teacher_vocab", teacher_model_vocab}};
}

losses::ChunkTeacherTargets CrossTokenizerObjective::teacher_targets(xtoken::XtokenBatch& xb) {
  const int64_t B = xb.batch, L = xb.teacher_seq;
  losses::ChunkTeacherTargets targets;
  if (teacher_) {
    const Tensor tokens = Tensor::from_ints(xb.teacher_inputs, {B, L}, device_);
    const Tensor logits = inference_logits(*teacher_, tokens);
    const tp::VocabTopK top = tp::vocab_topk(logits, {k_, options_.temperature, tp_group_});
    targets.ids = top.indices;
    targets.logprobs = top.logprobs;
    return targets;
  }
  // The cache: row b's position p is the teacher stream's position teacher_starts[b] + p.
  Tensor ids = Tensor::empty({B * L, k_}, DType::I32);
  Tensor logprobs = Tensor::empty({B * L, k_}, DType::F32);
  int32_t* id = ids.data<int32_t>();
  float* lp = logprobs.data<float>();
  std::vector<int64_t> covered(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = xb.teacher_starts[static_cast<size_t>(b)];
    const int64_t n = std::clamp<int64_t>(cache_->tokens() - start, 0, xb.teacher_positions[static_cast<size_t>(b)]);
    covered[static_cast<size_t>(b)] = n;
    if (n > 0) cache_->read_rows(start, n, id + b * L * k_, lp + b * L * k_);
    // Padding and positions past the cache: distinct placeholder ids (their chunks are dropped below).
    for (int64_t p = n; p < L; ++p)
      for (int64_t j = 0; j < k_; ++j) {
        id[(b * L + p) * k_ + j] = static_cast<int32_t>(j);
        lp[(b * L + p) * k_ + j] = -std::log(static_cast<float>(k_));
      }
  }
  xtoken::drop_teacher_positions(xb, covered);
  targets.ids = ids;
  targets.logprobs = logprobs;
  return targets;
}

ObjectiveLoss CrossTokenizerObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  const auto build_start = Clock::now();
  xtoken::XtokenBatch xb =
      xtoken::build_xtoken_batch(batch, stream_.train, student_texts_, teacher_texts_, teacher_context_);
  const double build_ms = ms_since(build_start);

  const auto teacher_start = Clock::now();
  const losses::ChunkTeacherTargets targets = teacher_targets(xb);
  const double teacher_ms = ms_since(teacher_start);

  // The normaliser: the valid chunks of the whole global micro-batch, summed on every rank before the loss.
  double global_chunks = static_cast<double>(xb.chunk_count);
  int dp = 1;
  if (dp_group_ && dp_group_->size() > 1) {
    dp = dp_group_->size();
    Tensor count = Tensor::scalar(global_chunks, device_.is_cpu() ? DType::F64 : DType::F32, device_);
    dp_group_->all_reduce(count, ReduceOp::Sum);
    global_chunks = count.item();
  }
  // The loop averages the dp ranks' gradients, so each rank divides by the global count over dp.
  losses::ChunkDistillationOptions options = options_;
  options.normalizer = std::max(1.0, global_chunks) / dp;

  const int64_t B = batch.batch, T = batch.seq;
  const int64_t V = logits.size(-1);
  const Tensor student = ops::reshape(logits, {B * T, V});
  const Tensor labels = Tensor::from_ints(batch.targets, {B * T}, device_);
  losses::ChunkAssignment chunks;
  chunks.student_chunk = Tensor::from_ints(xb.student_chunk, {B * T});
  chunks.teacher_chunk = Tensor::from_ints(xb.teacher_chunk, {B * xb.teacher_seq});
  chunks.chunk_count = xb.chunk_count;
  const losses::ChunkDistillationResult result =
      losses::chunk_distillation_loss(student, labels, targets, chunks, projection_, options, common_);

  const double coverage = static_cast<double>(xb.student_positions_in_chunks) / static_cast<double>(B * T);
  if (!coverage_checked_) {
    coverage_checked_ = true;
    if (coverage < min_coverage_)
      spdlog::warn(
          "distill: only {:.1f}% of the student's positions fall in an aligned chunk ({} chunks over {} rows "
          "of {} positions; distill.xtoken.min_coverage = {}): the two tokenizers hardly agree on the text",
          100 * coverage, xb.chunk_count, B, T, min_coverage_);
  }
  const bool ce_in_loss = options_.kd_ratio < 1 || options_.dynamic_ce_scaling;
  const double ce = ce_in_loss ? result.ce : plain_cross_entropy(student, labels, options_.ignore_index);
  return ObjectiveLoss{result.loss,
                       {{"kd", result.kd},
                        {"ce", ce},
                        {"chunk_coverage", coverage},
                        {"chunks", static_cast<double>(xb.chunk_count) / static_cast<double>(B)},
                        {"xtoken_batch_ms", build_ms},
                        {"teacher_ms", teacher_ms}}};
}

}  // namespace retort::distill
