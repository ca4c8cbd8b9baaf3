#pragma once
// Pre-tokenized token shards used as they are: files in llm.c's .bin format (token_shard.h), e.g. the output of
// llm.c's dev/data scripts. Nothing is tokenized or copied; the shards are only validated against the vocabulary.
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace retort::data {

// The shard files a spec names: one file, or every file a glob pattern matches, sorted. `key` names the setting
// in messages (e.g. "data.shards"); a spec that names no file is an InputError.
std::vector<std::filesystem::path> resolve_shard_files(const std::string& spec, const std::string& key);

// options.train_shards (and options.val_shards, which may be empty: no validation split) opened against
// options.vocab_size: a token id outside the vocabulary is an InputError naming the shard. With options.tokenizer
// the tokenizer is opened (its vocabulary must have exactly vocab_size ids) and becomes the dataset's; without
// one, the dataset has no tokenizer (kNoTokenizerFingerprint): training and evaluation work, text generation
// cannot.
PreparedDataset prepare_pretokenized_dataset(const DatasetOptions& options);

}  // namespace retort::data
