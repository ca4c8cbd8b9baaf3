#pragma once
// Corpus -> tokenizer -> train/validation token shards, cached in a data folder.
//
// The folder holds tokenizer.model, train_NNN.bin, val_NNN.bin and manifest.json. The manifest records
// what the cache was built from (corpus files with sizes and content hashes, vocab size) and what it holds
// (tokenizer fingerprint, split settings and seed, shard names and counts). A later call with the same
// corpus and vocab size reuses the tokenizer, and the shards too when the split settings and seed also
// match and the shards still validate; any difference rebuilds what it affects.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/corpus.h"

namespace retort::data {

struct DatasetOptions {
  // A text file, a folder or a glob pattern (see resolve_corpus).
  std::string corpus = kDefaultCorpus;
  std::filesystem::path data_dir;
  int64_t vocab_size = 8192;
  // Share of the tokens held out for validation, chosen as whole documents. 5% of the fortunes corpus
  // (about 40k tokens) is enough for a stable validation loss while leaving the rest for training.
  double val_fraction = 0.05;
  // Drives the document split (and the tokenizer's training sample on very large corpora).
  uint64_t seed = 0;
  // Tokens per shard at most; a split is cut into equal shards so that no shard is a tiny remainder.
  int64_t shard_tokens = 100'000'000;
};

struct PreparedDataset {
  std::filesystem::path tokenizer_path;
  std::string tokenizer_fingerprint;
  int64_t vocab_size = 0;
  std::vector<std::filesystem::path> train_shards;
  std::vector<std::filesystem::path> val_shards;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  bool reused_tokenizer = false;
  bool reused_shards = false;
};

// Builds (or reuses) the data folder. Every document is tokenized and followed by the tokenizer's
// end-of-document id; documents are shuffled with the seed and whole documents go to validation until it
// holds val_fraction of the tokens; both splits are written in that shuffled order, so a validation pass
// capped at its first batches still samples the whole corpus.
PreparedDataset prepare_token_dataset(const DatasetOptions& options);

// The shard file name of split "train" or "val", e.g. train_000.bin.
std::string shard_file_name(const std::string& split, int64_t index);

}  // namespace retort::data
