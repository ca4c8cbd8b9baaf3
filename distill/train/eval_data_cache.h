#pragma once
// `retort eval --data TEXT`: the text tokenized with the model's tokenizer into one token shard, kept in a cache
// folder of its own (never inside a run folder, which holds what training wrote). The folder's name is the key:
// the hash of the text's content (the files' bytes, in order, whatever their paths) and the tokenizer's
// fingerprint, so the same text scored again by a model with the same tokenizer reuses the shard, and any change of
// either makes a new one.
#include <filesystem>
#include <string>

#include "core/data/tokenizer.h"

namespace retort::distill {

struct EvalDataShard {
  std::filesystem::path shard;  // <cache_root>/<text hash>-<tokenizer fingerprint>/eval_000.bin
  bool reused = false;          // found in the cache rather than written now
  int64_t documents = 0;        // 0 when reused
};

// The shard of `corpus` (a file, folder or glob; split into documents like a training corpus, each followed by the
// end-of-document token; JSON-lines files give the `text_field` of each line, as the run's data.text_field) under
// `cache_root`, written atomically (a temporary folder renamed into place) when the cache does not hold it yet.
EvalDataShard eval_data_shard(const std::string& corpus, const std::string& text_field,
                              const data::Tokenizer& tokenizer, const std::filesystem::path& cache_root);

}  // namespace retort::distill
