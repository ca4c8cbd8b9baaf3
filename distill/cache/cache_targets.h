#pragma once
// From the top-k cache to the targets of one student batch. The cache (teacher_topk.h) holds one row per position
// of the training split read as one token stream. Each student batch row carries the stream position of its first
// input (TokenBatch::window_starts), so input (b, t) gets the cache row of position window_starts[b] + t: the
// teacher's distribution after exactly that token. When the training split is one shard (the toy corpus) the
// student's windows are the teacher's windows, contexts included; over several shards a row may have been computed
// with a window cut elsewhere (the same next-token distribution, with another amount of context).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "distill/cache/topk_cache.h"
#include "losses/topk_distillation.h"

namespace retort::distill {

// The teacher and temperature a cache was written with, next to its shards (the shard header has no room for
// them); a student at another temperature would read the teacher at the wrong temperature.
inline constexpr const char* kCacheInfoFile = "teacher.json";

// The cache's teacher.json; a missing or unreadable one is an InputError that says how to rebuild it.
nlohmann::json read_cache_info(const std::filesystem::path& directory);

// The identity the cache records of a split: its shards read in order as one token stream.
DatasetIdentity token_stream_identity(const std::vector<std::filesystem::path>& shards, int64_t vocab_size);

// What the student's run requires of the cache in `directory`.
struct CacheRequirements {
  CacheKind kind = CacheKind::TopK;  // a cache of the other kind is refused (distill.cache_kind)
  int k = 64;                        // distill.k, or distill.sample_k for a sampled cache
  std::string tokenizer_id;          // the student's tokenizer fingerprint
  int64_t vocab_size = 0;
  DatasetIdentity dataset;
  double temperature = 1.0;  // the cache's teacher.json must record this temperature
};

// Opens the cache; one made with another k, tokenizer, vocabulary, dataset or temperature, or an incomplete one,
// is an InputError that says how to rebuild it.
TopKCacheReader open_matching_cache(const std::filesystem::path& directory, const CacheRequirements& need);

// The teacher's targets of a student batch: indices / logprobs [B, T, k], labels = the batch's targets [B, T] and
// a mask [B, T] that is 0 for the positions past the end of the cache (their rows hold placeholder ids).
// From a sampled cache the "logprobs" are the log-weights of the sampled estimate (losses::TopkDivergence::
// ForwardKLSampled): log a_j = log(c_j / K) + log(p_j / r_j), -inf for the filler ids that no draw hit.
losses::TopkTargets cache_targets_for_batch(const TopKCacheReader& cache, const data::TokenBatch& batch);

}  // namespace retort::distill
