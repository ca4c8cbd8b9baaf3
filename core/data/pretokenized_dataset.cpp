#include "core/data/pretokenized_dataset.h"

#include <glob.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;

namespace {

// Every shard opened (and so validated) against the vocabulary; the total token count.
int64_t validated_tokens(const std::vector<fs::path>& shards, int64_t vocab_size) {
  int64_t tokens = 0;
  for (const fs::path& path : shards) tokens += TokenShard::open(path, vocab_size).size();
  return tokens;
}

}  // namespace

std::vector<fs::path> resolve_shard_files(const std::string& spec, const std::string& key) {
  std::vector<fs::path> files;
  if (fs::is_regular_file(spec)) {
    files.emplace_back(spec);
  } else {
    glob_t matches{};
    const int result = ::glob(spec.c_str(), 0, nullptr, &matches);
    if (result == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        if (fs::is_regular_file(matches.gl_pathv[i])) files.emplace_back(matches.gl_pathv[i]);
      }
    }
    ::globfree(&matches);
    RETORT_INPUT_CHECK(result == 0 || result == GLOB_NOMATCH, "cannot expand {} pattern '{}' (glob error {})", key,
                       spec, result);
  }
  std::sort(files.begin(), files.end());
  RETORT_INPUT_CHECK(!files.empty(),
                     "{} '{}' names no file: give a .bin token shard in llm.c's format or a glob pattern such as "
                     "'fineweb10B/fineweb_train_*.bin'",
                     key, spec);
  return files;
}

PreparedDataset prepare_pretokenized_dataset(const DatasetOptions& options) {
  RETORT_INPUT_CHECK(options.vocab_size > 0,
                     "data.vocab_size {} must be positive: with pre-tokenized shards it is the model's vocabulary "
                     "(every token id must be below it; 50257 for GPT-2's ids)",
                     options.vocab_size);
  PreparedDataset result;
  result.vocab_size = options.vocab_size;
  result.tokenizer_fingerprint = kNoTokenizerFingerprint;
  if (!options.tokenizer.empty()) {
    const Tokenizer tokenizer = open_tokenizer_file(options.tokenizer);
    RETORT_INPUT_CHECK(tokenizer.vocab_size() == options.vocab_size,
                       "the tokenizer file '{}' has {} ids but data.vocab_size is {}: set data.vocab_size={} (the "
                       "model's vocabulary is the tokenizer's)",
                       options.tokenizer.string(), tokenizer.vocab_size(), options.vocab_size, tokenizer.vocab_size());
    result.tokenizer_path = options.tokenizer;
    result.tokenizer_fingerprint = tokenizer.fingerprint();
  }
  result.train_shards = resolve_shard_files(options.train_shards, "data.shards");
  if (!options.val_shards.empty()) result.val_shards = resolve_shard_files(options.val_shards, "data.val_shards");
  for (const fs::path& path : result.val_shards) {
    RETORT_INPUT_CHECK(
        std::find(result.train_shards.begin(), result.train_shards.end(), path) == result.train_shards.end(),
        "the shard '{}' is named by both data.shards and data.val_shards: validation must be held out "
        "from training; narrow the patterns (llm.c names them *_train_*.bin and *_val_*.bin)",
        path.string());
  }
  result.train_tokens = validated_tokens(result.train_shards, options.vocab_size);
  result.val_tokens = validated_tokens(result.val_shards, options.vocab_size);
  result.reused_tokenizer = true;
  result.reused_shards = true;
  spdlog::info("data: pre-tokenized shards: {} train ({} tokens), {} val ({} tokens), vocab {}, tokenizer {}",
               result.train_shards.size(), result.train_tokens, result.val_shards.size(), result.val_tokens,
               result.vocab_size, options.tokenizer.empty() ? std::string("none") : options.tokenizer.string());
  return result;
}

}  // namespace retort::data
