#pragma once
// `retort distill train` and `retort distill topk`: off-policy distillation of a student from a teacher's top-k
// cache (or, distill.mode = online, from the teacher's full distribution computed in every step), on the training
// loop of `retort train` with a distillation loss in place of the labels' cross-entropy.
//
// The cache (distill/teacher_topk.h) holds one row per position of the training split read as one token stream.
// Each student batch row carries the stream position of its first input (TokenBatch::window_starts), so input
// (b, t) gets the cache row of position window_starts[b] + t: the teacher's distribution after exactly that
// token. When the training split is one shard (the toy corpus) the student's windows are the teacher's windows,
// contexts included; over several shards a row may have been computed with a window cut elsewhere (the same
// next-token distribution, with another amount of context).
#include <filesystem>
#include <string>
#include <vector>

#include "apps/trainer.h"
#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "distill/teacher_topk.h"
#include "distill/topk_cache.h"
#include "losses/topk_distillation.h"

namespace retort::apps {

// The identity the cache records of a split: its shards read in order as one token stream.
distill::DatasetIdentity token_stream_identity(const std::vector<std::filesystem::path>& shards, int64_t vocab_size);

// What the student's run requires of the cache in `directory`.
struct CacheRequirements {
  int k = 64;
  std::string tokenizer_id;  // the student's tokenizer fingerprint
  int64_t vocab_size = 0;
  distill::DatasetIdentity dataset;
  double temperature = 1.0;  // the cache's teacher.json must record this temperature
};

// Opens the cache; one made with another k, tokenizer, vocabulary, dataset or temperature, or an incomplete one,
// is an InputError that says how to rebuild it.
distill::TopKCacheReader open_matching_cache(const std::filesystem::path& directory, const CacheRequirements& need);

// The teacher's targets of a student batch: indices / logprobs [B, T, k], labels = the batch's targets [B, T] and
// a mask [B, T] that is 0 for the positions past the end of the cache (their rows hold placeholder ids).
losses::TopkTargets cache_targets_for_batch(const distill::TopKCacheReader& cache, const data::TokenBatch& batch);

// `retort distill train`: the student of `config` (every `retort train` key) distilled per distill.*.
TrainResult run_distill_training(const ResolvedConfig& config, Device device, bool resume);

// `retort distill topk`: writes (or resumes) the cache of distill.teacher over the training split, in windows of
// train.seq_len, at distill.temperature.
distill::TeacherTopKReport write_teacher_cache(const ResolvedConfig& config, Device device);

}  // namespace retort::apps
