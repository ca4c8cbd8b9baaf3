#pragma once
// Corpus -> tokenizer -> train/validation token shards, cached in a data folder; or pre-tokenized shards used as
// they are.
//
// The folder holds its tokenizer (tokenizer.model; a given tokenizer.json is kept as tokenizer.json, with the
// tokenizer_config.json beside it), train_NNN.bin, val_NNN.bin and manifest.json. The manifest records
// what the folder was made from (corpus files with sizes and content hashes, vocab size, the JSON-lines text
// field, the trained tokenizer's type, a given tokenizer file) and what it holds (tokenizer fingerprint, split settings
// and seed, shard names and counts). The tokenizer of a folder is made once and never replaced: runs trained on the
// folder rely on it (and eval reads its validation split), so a call whose corpus, vocab size or tokenizer differs from
// the manifest's is an InputError that says what differs and to give another folder. Only the shards follow the split
// settings: a new seed, val_fraction or shard size rebuilds them with the same tokenizer.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/data/tokenizer.h"

namespace retort::data {

struct DatasetOptions {
  // A text file, a folder or a glob pattern (see resolve_corpus); .jsonl files are JSON lines.
  std::string corpus = kDefaultCorpus;
  // The field of a JSON-lines record that holds its text.
  std::string text_field = kDefaultTextField;
  // A tokenizer file used as it is (see open_tokenizer_file) instead of training one; empty: train a BPE
  // tokenizer of vocab_size on the corpus. Its vocabulary must have exactly vocab_size ids.
  std::filesystem::path tokenizer{};
  // Pre-tokenized shards in llm.c's format, used as they are (a file or a glob pattern each). Set, they replace
  // corpus, data_dir and val_fraction; val_shards empty: no validation split.
  std::string train_shards{};
  std::string val_shards{};
  std::filesystem::path data_dir{};
  int64_t vocab_size = 8192;  // with a tokenizer file: its ids, or 0 for "whatever the file has"
  // The algorithm of the tokenizer trained on the corpus (ignored with a tokenizer file). Recorded in the manifest,
  // so a folder made with one type is refused for the other.
  TokenizerModelType tokenizer_type = TokenizerModelType::kBpe;
  // Share of the tokens held out for validation, chosen as whole documents. 5% of the fortunes corpus
  // (about 40k tokens) is enough for a stable validation loss while leaving the rest for training. 0: no
  // validation split (val_shards is empty).
  double val_fraction = 0.05;
  // Drives the document split (and the tokenizer's training sample on very large corpora).
  uint64_t seed = 0;
  // Tokens per shard at most; a split is cut into equal shards so that no shard is a tiny remainder.
  int64_t shard_tokens = 100'000'000;
};

// The tokenizer fingerprint of pre-tokenized shards given without a tokenizer: their ids cannot become text.
inline constexpr const char* kNoTokenizerFingerprint = "none";

struct PreparedDataset {
  // Empty when pre-tokenized shards come without a tokenizer.
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

// Builds (or reuses) the data folder, or checks the pre-tokenized shards (see pretokenized_dataset.h). Every document
// is tokenized and followed by the tokenizer's end-of-document id; documents are shuffled with the seed and whole
// documents go to validation until it holds val_fraction of the tokens; both splits are written in that shuffled order,
// so a validation pass capped at its first batches still samples the whole corpus.
PreparedDataset prepare_token_dataset(const DatasetOptions& options);

// The shard file name of split "train" or "val", e.g. train_000.bin.
std::string shard_file_name(const std::string& split, int64_t index);

}  // namespace retort::data
