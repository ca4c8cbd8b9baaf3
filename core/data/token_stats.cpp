#include "core/data/token_stats.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace retort::data {

std::vector<int64_t> unigram_counts(std::span<const int32_t> tokens, int64_t vocab_size) {
  RETORT_INPUT_CHECK(vocab_size > 0, "vocab size {} must be positive", vocab_size);
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    RETORT_INPUT_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "token {} at position {} is outside vocab 0..{}",
                       tokens[i], i, vocab_size - 1);
    ++counts[static_cast<size_t>(tokens[i])];
  }
  return counts;
}

std::vector<int64_t> unigram_counts(std::span<const TokenShard> shards, int64_t vocab_size) {
  RETORT_INPUT_CHECK(vocab_size > 0, "vocab size {} must be positive", vocab_size);
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int32_t> buffer;
  for (const TokenShard& shard : shards) {
    for (int64_t begin = 0; begin < shard.size(); begin += kChunk) {
      buffer.resize(static_cast<size_t>(std::min(kChunk, shard.size() - begin)));
      shard.copy_to(begin, buffer);
      for (const int32_t id : buffer) {
        RETORT_INPUT_CHECK(id < vocab_size, "shard '{}' holds token {} outside vocab 0..{}", shard.path().string(), id,
                           vocab_size - 1);
        ++counts[static_cast<size_t>(id)];
      }
    }
  }
  return counts;
}

double unigram_entropy(std::span<const int64_t> counts) {
  int64_t total = 0;
  for (const int64_t count : counts) total += count;
  if (total == 0) return 0.0;
  // H = log N - (1/N) sum c log c, which sums exact integer-derived terms instead of many tiny p log p.
  double sum_c_log_c = 0.0;
  for (const int64_t count : counts) {
    if (count > 0) sum_c_log_c += static_cast<double>(count) * std::log(static_cast<double>(count));
  }
  const auto n = static_cast<double>(total);
  return std::log(n) - sum_c_log_c / n;
}

double unigram_entropy(std::span<const int32_t> tokens, int64_t vocab_size) {
  return unigram_entropy(unigram_counts(tokens, vocab_size));
}

}  // namespace retort::data
