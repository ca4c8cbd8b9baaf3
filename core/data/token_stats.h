#pragma once
// Unigram statistics of a token stream. The unigram entropy is the cross-entropy loss of the best model
// that ignores context: a language model whose loss is not clearly below it has learned nothing yet, so
// the training app prints it as the baseline to beat.
#include <cstdint>
#include <span>
#include <vector>

#include "core/data/token_shard.h"

namespace retort::data {

// Occurrences of each id in [0, vocab_size); ids outside are an InputError naming the position.
std::vector<int64_t> unigram_counts(std::span<const int32_t> tokens, int64_t vocab_size);
std::vector<int64_t> unigram_counts(std::span<const TokenShard> shards, int64_t vocab_size);

// Shannon entropy of the empirical distribution, in nats per token; 0 for an empty stream.
double unigram_entropy(std::span<const int64_t> counts);
double unigram_entropy(std::span<const int32_t> tokens, int64_t vocab_size);

}  // namespace retort::data
