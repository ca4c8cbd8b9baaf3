#include "core/data/dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "core/data/content_hash.h"
#include "core/data/rng.h"
#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kTokenizerName = "tokenizer.model";
constexpr int kManifestVersion = 1;
// Seed streams, so the split never shares random numbers with other seeded choices.
constexpr uint64_t kSplitStream = 0x5B11;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What the tokenizer depends on; equal keys mean the tokenizer in the folder can be reused. The seed only
// picks the tokenizer's training sample on corpora over the byte budget, so elsewhere a new seed (a new
// split) keeps the tokenizer.
json corpus_key(const std::vector<fs::path>& files, const DatasetOptions& options) {
  json file_list = json::array();
  int64_t total_bytes = 0;
  for (const fs::path& file : files) {
    const auto bytes = static_cast<int64_t>(fs::file_size(file));
    total_bytes += bytes;
    file_list.push_back({{"path", file.string()}, {"bytes", bytes}, {"hash", file_content_hash_hex(file)}});
  }
  const bool sampled = total_bytes > TokenizerTrainOptions{}.max_training_bytes;
  return {{"files", std::move(file_list)},
          {"vocab_size", options.vocab_size},
          {"tokenizer_seed", sampled ? json(options.seed) : json(nullptr)}};
}

// What the shards depend on beyond the tokenizer.
json split_key(const DatasetOptions& options) {
  return {{"val_fraction", options.val_fraction}, {"shard_tokens", options.shard_tokens}, {"seed", options.seed}};
}

json read_manifest(const fs::path& path) {
  if (!fs::exists(path)) return json();
  try {
    return json::parse(read_file(path));
  } catch (const std::exception& error) {
    spdlog::warn("data: ignoring unreadable manifest '{}' ({}); rebuilding", path.string(), error.what());
    return json();
  }
}

std::vector<std::vector<int32_t>> tokenize_documents(const Tokenizer& tokenizer,
                                                     const std::vector<std::string>& documents) {
  std::vector<std::vector<int32_t>> tokens(documents.size());
  const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  const size_t per_worker = (documents.size() + workers - 1) / workers;
  std::vector<std::exception_ptr> failures(workers);
  {
    std::vector<std::jthread> threads;
    for (size_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          const size_t end = std::min(documents.size(), (w + 1) * per_worker);
          for (size_t d = w * per_worker; d < end; ++d) {
            tokens[d] = tokenizer.encode(documents[d]);
            tokens[d].push_back(tokenizer.eos_id());
          }
        } catch (...) {
          failures[w] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
  return tokens;
}

struct SplitResult {
  std::vector<fs::path> shards;
  int64_t tokens = 0;
  int64_t documents = 0;
};

// Concatenates the documents of one split and writes it as equal shards of at most shard_tokens tokens.
SplitResult write_split(const std::string& split, const std::vector<size_t>& order,
                        const std::vector<std::vector<int32_t>>& tokens, int64_t vocab_size,
                        const DatasetOptions& options) {
  SplitResult result;
  result.documents = static_cast<int64_t>(order.size());
  for (const size_t d : order) result.tokens += static_cast<int64_t>(tokens[d].size());
  const int64_t shard_count =
      result.tokens == 0 ? 0 : (result.tokens + options.shard_tokens - 1) / options.shard_tokens;
  std::vector<int32_t> stream;
  stream.reserve(static_cast<size_t>(result.tokens));
  for (const size_t d : order) stream.insert(stream.end(), tokens[d].begin(), tokens[d].end());
  for (int64_t s = 0; s < shard_count; ++s) {
    const int64_t begin = result.tokens * s / shard_count;
    const int64_t end = result.tokens * (s + 1) / shard_count;
    const fs::path path = options.data_dir / shard_file_name(split, s);
    write_token_shard(path, std::span<const int32_t>(stream).subspan(begin, end - begin), vocab_size);
    result.shards.push_back(path);
  }
  // Shards left from an earlier, larger build would otherwise be picked up by anyone globbing the folder.
  for (int64_t s = shard_count; fs::exists(options.data_dir / shard_file_name(split, s)); ++s) {
    fs::remove(options.data_dir / shard_file_name(split, s));
  }
  return result;
}

// The manifest's shards still exist, validate against the tokenizer, and hold the recorded counts.
bool shards_intact(const json& manifest, const DatasetOptions& options, PreparedDataset& out) {
  try {
    for (const std::string split : {"train", "val"}) {
      const json& entry = manifest.at(split);
      std::vector<fs::path> paths;
      int64_t tokens = 0;
      for (const json& name : entry.at("shards")) {
        const fs::path path = options.data_dir / name.get<std::string>();
        tokens += TokenShard::open(path, options.vocab_size).size();
        paths.push_back(path);
      }
      if (tokens != entry.at("tokens").get<int64_t>()) return false;
      (split == "train" ? out.train_shards : out.val_shards) = std::move(paths);
      (split == "train" ? out.train_tokens : out.val_tokens) = tokens;
      (split == "train" ? out.train_documents : out.val_documents) = entry.at("documents").get<int64_t>();
    }
    return true;
  } catch (const std::exception& error) {
    spdlog::warn("data: cached shards in '{}' are not usable ({}); rebuilding them", options.data_dir.string(),
                 error.what());
    return false;
  }
}

json split_entry(const SplitResult& split) {
  json names = json::array();
  for (const fs::path& path : split.shards) names.push_back(path.filename().string());
  return {{"shards", std::move(names)}, {"tokens", split.tokens}, {"documents", split.documents}};
}

void validate(const DatasetOptions& options) {
  RETORT_INPUT_CHECK(!options.data_dir.empty(),
                     "the data folder is not set: give a folder for the tokenizer and shards");
  RETORT_INPUT_CHECK(options.val_fraction >= 0.0 && options.val_fraction < 1.0,
                     "val_fraction {} must be in [0, 1): it is the share of tokens held out for validation",
                     options.val_fraction);
  RETORT_INPUT_CHECK(options.shard_tokens > 0 && options.shard_tokens <= std::numeric_limits<int32_t>::max(),
                     "shard_tokens {} must be in 1..2^31-1 (the shard header stores the count as int32)",
                     options.shard_tokens);
}

}  // namespace

std::string shard_file_name(const std::string& split, int64_t index) {
  return fmt::format("{}_{:03d}.bin", split, index);
}

PreparedDataset prepare_token_dataset(const DatasetOptions& options) {
  validate(options);
  const auto start = std::chrono::steady_clock::now();
  fs::create_directories(options.data_dir);
  const fs::path manifest_path = options.data_dir / kManifestName;
  const fs::path tokenizer_path = options.data_dir / kTokenizerName;

  const std::vector<fs::path> files = resolve_corpus(options.corpus);
  const json corpus = corpus_key(files, options);
  spdlog::info("data: corpus '{}' -> {} text files", options.corpus, files.size());

  PreparedDataset result;
  result.tokenizer_path = tokenizer_path;
  const json manifest = read_manifest(manifest_path);
  const bool same_corpus = manifest.is_object() && manifest.value("version", 0) == kManifestVersion &&
                           manifest.contains("corpus") && manifest["corpus"] == corpus;
  std::optional<Tokenizer> tokenizer;
  if (same_corpus && fs::exists(tokenizer_path)) {
    Tokenizer cached = Tokenizer::load(tokenizer_path);
    if (cached.fingerprint() == manifest.value("tokenizer_fingerprint", std::string())) tokenizer = std::move(cached);
  }
  result.reused_tokenizer = tokenizer.has_value();
  if (result.reused_tokenizer && manifest.value("split", json()) == split_key(options) &&
      shards_intact(manifest, options, result)) {
    result.tokenizer_fingerprint = tokenizer->fingerprint();
    result.vocab_size = tokenizer->vocab_size();
    result.reused_shards = true;
    spdlog::info("data: reusing '{}' (tokenizer {}, {} train + {} val tokens)", options.data_dir.string(),
                 result.tokenizer_fingerprint, result.train_tokens, result.val_tokens);
    return result;
  }
  // From here the folder is being rebuilt: without a manifest, an interrupted rebuild is never mistaken for
  // a finished one.
  fs::remove(manifest_path);

  const std::vector<std::string> documents = read_documents(files);
  RETORT_INPUT_CHECK(!documents.empty(), "corpus '{}' holds no text (all {} files are empty or blank)", options.corpus,
                     files.size());
  RETORT_INPUT_CHECK(options.val_fraction == 0.0 || documents.size() >= 2,
                     "corpus '{}' holds a single document, which cannot be split into train and validation: give "
                     "more text or set val_fraction to 0",
                     options.corpus);
  if (!tokenizer) {
    spdlog::info("data: training a BPE tokenizer (vocab {}) on {} documents", options.vocab_size, documents.size());
    tokenizer = Tokenizer::train(
        documents, {.vocab_size = options.vocab_size, .model_path = tokenizer_path, .seed = options.seed});
  } else {
    spdlog::info("data: reusing tokenizer '{}' ({})", tokenizer_path.string(), tokenizer->fingerprint());
  }

  auto tokenize_start = std::chrono::steady_clock::now();
  const std::vector<std::vector<int32_t>> tokens = tokenize_documents(*tokenizer, documents);
  int64_t total_tokens = 0;
  for (const auto& document : tokens) total_tokens += static_cast<int64_t>(document.size());
  spdlog::info("data: tokenized {} documents into {} tokens in {:.1f} s", documents.size(), total_tokens,
               seconds_since(tokenize_start));

  std::vector<size_t> order(documents.size());
  std::iota(order.begin(), order.end(), size_t{0});
  SplitMix64 rng(derive_seed(options.seed, kSplitStream));
  seeded_shuffle(std::span<size_t>(order), rng);
  // A positive fraction always holds out at least one document, so a small corpus still gets a val split.
  const int64_t val_target =
      options.val_fraction > 0.0
          ? std::max<int64_t>(1, std::llround(options.val_fraction * static_cast<double>(total_tokens)))
          : 0;
  size_t val_count = 0;
  for (int64_t val_tokens = 0; val_tokens < val_target && val_count + 1 < order.size(); ++val_count) {
    val_tokens += static_cast<int64_t>(tokens[order[val_count]].size());
  }
  const std::vector<size_t> val_order(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(val_count));
  const std::vector<size_t> train_order(order.begin() + static_cast<std::ptrdiff_t>(val_count), order.end());

  const SplitResult train = write_split("train", train_order, tokens, tokenizer->vocab_size(), options);
  const SplitResult val = write_split("val", val_order, tokens, tokenizer->vocab_size(), options);
  write_text_atomic(manifest_path, json{{"format", "retort-token-dataset"},
                                        {"version", kManifestVersion},
                                        {"corpus_spec", options.corpus},
                                        {"corpus", corpus},
                                        {"tokenizer", kTokenizerName},
                                        {"tokenizer_fingerprint", tokenizer->fingerprint()},
                                        {"split", split_key(options)},
                                        {"train", split_entry(train)},
                                        {"val", split_entry(val)}}
                                       .dump(2));

  result.tokenizer_fingerprint = tokenizer->fingerprint();
  result.vocab_size = tokenizer->vocab_size();
  result.train_shards = train.shards;
  result.val_shards = val.shards;
  result.train_tokens = train.tokens;
  result.val_tokens = val.tokens;
  result.train_documents = train.documents;
  result.val_documents = val.documents;
  spdlog::info(
      "data: wrote {} train tokens ({} documents, {} shards) and {} val tokens ({} documents) to '{}' in "
      "{:.1f} s",
      train.tokens, train.documents, train.shards.size(), val.tokens, val.documents, options.data_dir.string(),
      seconds_since(start));
  return result;
}

}  // namespace retort::data
