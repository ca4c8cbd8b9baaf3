#include "distill/train/eval_data_cache.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/data/content_hash.h"
#include "core/data/corpus.h"
#include "core/data/token_shard.h"
#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// Bumped when the shard's content for the same text and tokenizer changes (document splitting, separators).
constexpr const char* kEvalShardLayout = "eval-shard-v1";

}  // namespace

EvalDataShard eval_data_shard(const std::string& corpus, const std::string& text_field,
                              const data::Tokenizer& tokenizer, const fs::path& cache_root) {
  const std::vector<fs::path> files = data::resolve_corpus(corpus);
  data::ContentHash text_hash;
  text_hash.update(kEvalShardLayout);
  text_hash.update(text_field);  // a JSON-lines file gives other documents under another field
  for (const fs::path& file : files) text_hash.update(data::file_content_hash_hex(file));
  const fs::path folder = cache_root / (text_hash.hex() + "-" + tokenizer.fingerprint());
  EvalDataShard result;
  result.shard = folder / "eval_000.bin";
  if (fs::exists(result.shard)) {
    result.reused = true;
    spdlog::info("eval: reusing the tokenized text in {}", folder.string());
    return result;
  }
  std::vector<int32_t> tokens;
  for (const std::string& document : data::read_documents(files, text_field)) {
    const std::vector<int32_t> ids = tokenizer.encode(document);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.eos_id());
    ++result.documents;
  }
  RETORT_INPUT_CHECK(!tokens.empty(), "--data {}: no text found in {} file(s)", corpus, files.size());
  // Written beside its final name and renamed, so a reader never sees half a shard; a concurrent writer of the
  // same key loses the rename race harmlessly (the same bytes are already there).
  const fs::path temp = cache_root / fmt::format(".tmp-{}-{}", folder.filename().string(), ::getpid());
  fs::remove_all(temp);
  fs::create_directories(temp);
  data::write_token_shard(temp / "eval_000.bin", tokens, tokenizer.vocab_size());
  std::error_code error;
  fs::rename(temp, folder, error);
  if (error) {
    fs::remove_all(temp);
    RETORT_CHECK(fs::exists(result.shard), "cannot create the eval data cache {}: {}", folder.string(),
                 error.message());
  }
  spdlog::info("eval: tokenized {} document(s), {} tokens, into {}", result.documents, tokens.size(), folder.string());
  return result;
}

}  // namespace retort::distill
