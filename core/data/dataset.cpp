#include "core/data/dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "core/data/content_hash.h"
#include "core/data/pretokenized_dataset.h"
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

// What the folder's tokenizer depends on, as the manifest records it. The seed only picks the tokenizer's
// training sample on corpora over the byte budget; it is recorded but never compared (see same_source), so a new
// seed (a new split) keeps the tokenizer.
json corpus_key(const std::vector<fs::path>& files, const DatasetOptions& options, const Tokenizer* given) {
  json file_list = json::array();
  int64_t total_bytes = 0;
  bool any_jsonl = false;
  for (const fs::path& file : files) {
    const auto bytes = static_cast<int64_t>(fs::file_size(file));
    total_bytes += bytes;
    any_jsonl = any_jsonl || is_jsonl_file(file);
    file_list.push_back({{"path", file.string()}, {"bytes", bytes}, {"hash", file_content_hash_hex(file)}});
  }
  const bool sampled = given == nullptr && total_bytes > TokenizerTrainOptions{}.max_training_bytes;
  json key{{"files", std::move(file_list)},
           {"vocab_size", options.vocab_size},
           {"tokenizer_seed", sampled ? json(options.seed) : json(nullptr)}};
  // Added only where they apply, so folders made before these options existed keep their key.
  if (any_jsonl) key["text_field"] = options.text_field;
  if (given == nullptr && options.tokenizer_type != TokenizerModelType::kBpe) {
    key["tokenizer_type"] = tokenizer_model_type_name(options.tokenizer_type);
  }
  if (given != nullptr) {
    key["tokenizer_file"] = {{"path", fs::absolute(options.tokenizer).lexically_normal().string()},
                             {"fingerprint", given->fingerprint()}};
  }
  return key;
}

// What differs between the source a folder was made from and the one asked for, in words; empty when the same
// tokenizer would come out.
std::string source_differences(const json& made, const json& asked, const json& manifest,
                               const DatasetOptions& options) {
  std::vector<std::string> differences;
  if (made.value("files", json()) != asked.at("files")) {
    std::map<std::string, json> before, after;
    for (const json& file : made.value("files", json::array())) before[file.value("path", "")] = file;
    for (const json& file : asked.at("files")) after[file.at("path").get<std::string>()] = file;
    std::vector<std::string> details;
    for (const auto& [path, file] : after) {
      if (!before.contains(path)) {
        details.push_back(fmt::format("'{}' is new", path));
      } else if (before[path] != file) {
        details.push_back(fmt::format("'{}' changed ({} -> {} bytes)", path, before[path].value("bytes", int64_t{0}),
                                      file.at("bytes").get<int64_t>()));
      }
    }
    for (const auto& [path, file] : before) {
      if (!after.contains(path)) details.push_back(fmt::format("'{}' is gone", path));
    }
    const size_t shown = std::min<size_t>(details.size(), 3);
    std::string listed;
    for (size_t i = 0; i < shown; ++i) listed += (i ? "; " : "") + details[i];
    if (details.size() > shown) listed += fmt::format("; and {} more", details.size() - shown);
    differences.push_back(fmt::format("it was made from corpus '{}' ({} files), this config gives '{}' ({} files): {}",
                                      manifest.value("corpus_spec", std::string("?")), before.size(), options.corpus,
                                      after.size(), listed));
  }
  if (made.value("vocab_size", int64_t{-1}) != asked.at("vocab_size").get<int64_t>()) {
    differences.push_back(fmt::format("its vocab size is {}, this config asks for {}",
                                      made.value("vocab_size", int64_t{-1}), options.vocab_size));
  }
  if (made.value("text_field", json()) != asked.value("text_field", json())) {
    differences.push_back(fmt::format("its JSON-lines text field is {}, this config gives {}",
                                      made.value("text_field", json()).dump(),
                                      asked.value("text_field", json()).dump()));
  }
  // A trained tokenizer's algorithm; the key is absent for BPE (folders made before unigram existed are BPE). A given
  // tokenizer file has none: its fingerprint below tells.
  const auto trained_type = [](const json& key) {
    return key.contains("tokenizer_file") ? json() : key.value("tokenizer_type", json("bpe"));
  };
  if (trained_type(made) != trained_type(asked) && !trained_type(made).is_null() && !trained_type(asked).is_null()) {
    differences.push_back(fmt::format("its tokenizer is a {} tokenizer, this config asks for data.tokenizer_type={}",
                                      trained_type(made).get<std::string>(), trained_type(asked).get<std::string>()));
  }
  // A given tokenizer counts by its bytes: the same file moved elsewhere is the same tokenizer.
  const json made_file = made.value("tokenizer_file", json()), asked_file = asked.value("tokenizer_file", json());
  const auto fingerprint_of = [](const json& file) {
    return file.is_null() ? json() : file.value("fingerprint", json());
  };
  if (fingerprint_of(made_file) != fingerprint_of(asked_file)) {
    const auto describe = [](const json& file) {
      return file.is_null() ? std::string("a tokenizer trained on the corpus")
                            : fmt::format("the tokenizer file '{}' (fingerprint {})", file.value("path", ""),
                                          file.value("fingerprint", ""));
    };
    differences.push_back(fmt::format("it uses {}, this config gives {}", describe(made_file), describe(asked_file)));
  }
  std::string text;
  for (size_t i = 0; i < differences.size(); ++i) text += (i ? "; " : "") + differences[i];
  return text;
}

// A folder beside `data_dir` named after the corpus, to suggest in the refusal.
std::string suggested_folder(const DatasetOptions& options) {
  fs::path corpus = fs::path(options.corpus).lexically_normal();
  if (!corpus.has_filename()) corpus = corpus.parent_path();
  std::string name;
  for (const char c : corpus.stem().string()) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') name += c;
  }
  if (name.empty()) name = "corpus";
  fs::path folder = options.data_dir.parent_path() / name;
  if (folder.lexically_normal() == options.data_dir.lexically_normal())
    folder += fmt::format("-v{}", options.vocab_size);
  if (options.tokenizer.empty() && options.tokenizer_type != TokenizerModelType::kBpe)
    folder += std::string("-") + tokenizer_model_type_name(options.tokenizer_type);
  return folder.string();
}

// What the shards depend on beyond the tokenizer.
json split_key(const DatasetOptions& options) {
  return {{"val_fraction", options.val_fraction}, {"shard_tokens", options.shard_tokens}, {"seed", options.seed}};
}

// The folder's manifest, or null for a folder that has none yet (new, or interrupted before its tokenizer was
// recorded). A manifest of another format is an error rather than a rebuild: the folder may be in use.
json read_manifest(const fs::path& path) {
  if (!fs::exists(path)) return json();
  json manifest;
  try {
    manifest = json::parse(read_file(path));
  } catch (const std::exception& error) {
    throw InputError(
        fmt::format("the data folder's {} is unreadable ({}): restore it, or delete its folder to "
                    "rebuild it if no run needs it",
                    path.string(), error.what()));
  }
  RETORT_INPUT_CHECK(manifest.is_object() && manifest.value("version", 0) == kManifestVersion &&
                         manifest.contains("corpus") && manifest.contains("tokenizer_fingerprint"),
                     "{} is not a retort data manifest of version {}: give another data.dir, or delete its folder to "
                     "rebuild it if no run needs it",
                     path.string(), kManifestVersion);
  return manifest;
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

PreparedDataset prepare_token_dataset(const DatasetOptions& given_options) {
  // vocab_size 0 with a tokenizer file: the file's vocabulary (a fine-tuned model brings its own tokenizer).
  DatasetOptions options = given_options;
  if (options.vocab_size == 0 && !options.tokenizer.empty())
    options.vocab_size = open_tokenizer_file(options.tokenizer).vocab_size();
  if (!options.train_shards.empty()) return prepare_pretokenized_dataset(options);
  validate(options);
  const auto start = std::chrono::steady_clock::now();
  fs::create_directories(options.data_dir);
  const fs::path manifest_path = options.data_dir / kManifestName;
  const json manifest = read_manifest(manifest_path);
  // The folder's copy of its tokenizer: the name its manifest records, else the name a given file's copy takes
  // (tokenizer.json for a tokenizer.json), else the trained model's.
  const std::string tokenizer_name = manifest.is_object() ? manifest.value("tokenizer", std::string(kTokenizerName))
                                     : options.tokenizer.empty() ? std::string(kTokenizerName)
                                                                 : tokenizer_copy_name(options.tokenizer);
  const fs::path tokenizer_path = options.data_dir / tokenizer_name;

  const std::vector<fs::path> files = resolve_corpus(options.corpus);
  std::optional<Tokenizer> given;
  if (!options.tokenizer.empty()) {
    given = open_tokenizer_file(options.tokenizer);
    RETORT_INPUT_CHECK(given->vocab_size() == options.vocab_size,
                       "the tokenizer file '{}' has {} ids but data.vocab_size is {}: set data.vocab_size={} (the "
                       "model's vocabulary is the tokenizer's)",
                       options.tokenizer.string(), given->vocab_size(), options.vocab_size, given->vocab_size());
  }
  const json corpus = corpus_key(files, options, given ? &*given : nullptr);
  spdlog::info("data: corpus '{}' -> {} text files", options.corpus, files.size());

  PreparedDataset result;
  result.tokenizer_path = tokenizer_path;
  std::optional<Tokenizer> tokenizer;
  // A folder with a manifest already has its tokenizer: it is reused or the call is refused, never retrained.
  if (manifest.is_object()) {
    const json made = manifest.value("corpus", json::object());
    const std::string differences = source_differences(made, corpus, manifest, options);
    RETORT_INPUT_CHECK(differences.empty(),
                       "the data folder '{}' was made from other data: {}. A data folder is never rebuilt in place, "
                       "since runs trained on it rely on its tokenizer and validation split: set data.dir to a new "
                       "folder (e.g. data.dir={}), or delete '{}' if no run needs it",
                       options.data_dir.string(), differences, suggested_folder(options), options.data_dir.string());
    const std::string recorded = manifest.value("tokenizer_fingerprint", std::string());
    RETORT_INPUT_CHECK(fs::exists(tokenizer_path),
                       "the data folder '{}' lost its tokenizer: {} is missing (its manifest.json records tokenizer "
                       "{}). Restore the file, or delete '{}' to rebuild the folder if no run needs it",
                       options.data_dir.string(), tokenizer_path.string(), recorded, options.data_dir.string());
    tokenizer = Tokenizer::load(tokenizer_path);
    RETORT_INPUT_CHECK(tokenizer->fingerprint() == recorded,
                       "{} is not the tokenizer the data folder was made with (fingerprint {}, its manifest.json "
                       "records {}): it was replaced. Restore it, or delete '{}' to rebuild the folder if no run needs "
                       "it",
                       tokenizer_path.string(), tokenizer->fingerprint(), recorded, options.data_dir.string());
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

  const std::vector<std::string> documents = read_documents(files, options.text_field);
  RETORT_INPUT_CHECK(!documents.empty(), "corpus '{}' holds no text (all {} files are empty or blank)", options.corpus,
                     files.size());
  RETORT_INPUT_CHECK(options.val_fraction == 0.0 || documents.size() >= 2,
                     "corpus '{}' holds a single document, which cannot be split into train and validation: give "
                     "more text (documents are separated by blank lines, '%' lines or JSON lines), or set "
                     "data.val_fraction=0 to train without a validation split",
                     options.corpus);
  json building = manifest.is_object() ? manifest : json();
  if (!tokenizer) {
    if (given) {
      spdlog::info("data: using the tokenizer '{}' ({}, vocab {}) as it is", options.tokenizer.string(),
                   given->fingerprint(), given->vocab_size());
      tokenizer = Tokenizer::load(copy_tokenizer_file(options.tokenizer, options.data_dir));
    } else {
      spdlog::info("data: training a {} tokenizer (vocab {}) on {} documents",
                   tokenizer_model_type_name(options.tokenizer_type), options.vocab_size, documents.size());
      tokenizer = Tokenizer::train(documents, {.vocab_size = options.vocab_size,
                                               .model_path = tokenizer_path,
                                               .seed = options.seed,
                                               .model_type = options.tokenizer_type});
    }
    building = json{{"format", "retort-token-dataset"}, {"version", kManifestVersion},
                    {"corpus_spec", options.corpus},    {"corpus", corpus},
                    {"tokenizer", tokenizer_name},      {"tokenizer_fingerprint", tokenizer->fingerprint()}};
  } else {
    spdlog::info("data: reusing tokenizer '{}' ({}); rebuilding the shards", tokenizer_path.string(),
                 tokenizer->fingerprint());
  }
  // From here the shards are being rebuilt: a manifest without splits records the tokenizer, so an interrupted
  // rebuild is neither mistaken for a finished one nor loses what the tokenizer was made from.
  building.erase("split");
  building.erase("train");
  building.erase("val");
  write_text_atomic(manifest_path, building.dump(2));

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
  building["split"] = split_key(options);
  building["train"] = split_entry(train);
  building["val"] = split_entry(val);
  write_text_atomic(manifest_path, building.dump(2));

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
