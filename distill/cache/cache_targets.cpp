#include "distill/cache/cache_targets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

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
  expect.kind = need.kind;
  expect.tokenizer_id = need.tokenizer_id;
  expect.dataset = need.dataset;
  distill::TopKCacheReader reader = distill::TopKCacheReader::open(directory, expect);
  const char* letter = need.kind == CacheKind::Sampled ? "K" : "k";
  const char* key = need.kind == CacheKind::Sampled ? "distill.sample_k" : "distill.k";
  RETORT_INPUT_CHECK(
      reader.k() == need.k,
      "the cache '{}' holds {} = {} entries per token, the run asks for {} = {}: set {}={} or write a cache "
      "with {} = {} into another distill.cache_dir",
      directory.string(), letter, reader.k(), letter, need.k, key, reader.k(), letter, need.k);
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
  const bool sampled = cache.spec().kind == CacheKind::Sampled;
  std::vector<int32_t> counts(sampled ? static_cast<size_t>(T * k) : 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = batch.window_starts[static_cast<size_t>(b)];
    const int64_t covered = std::clamp<int64_t>(cache.tokens() - start, 0, T);
    if (covered > 0 && !sampled) cache.read_rows(start, covered, indices + b * T * k, logprobs + b * T * k);
    if (covered > 0 && sampled) {
      // The estimator's weights a_j = (c_j / K) (p_j / r_j), as logs; ids no draw hit weigh 0.
      float* log_weights = logprobs + b * T * k;
      cache.read_sampled_rows(start, covered, indices + b * T * k, counts.data(), log_weights);
      const float log_draws = std::log(static_cast<float>(k));
      for (int64_t i = 0; i < covered * k; ++i)
        log_weights[i] =
            counts[static_cast<size_t>(i)] == 0
                ? -std::numeric_limits<float>::infinity()
                : std::log(static_cast<float>(counts[static_cast<size_t>(i)])) - log_draws + log_weights[i];
    }
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

}  // namespace retort::distill
