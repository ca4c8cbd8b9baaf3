#include "core/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "core/data/byte_level_bpe.h"
#include "core/data/content_hash.h"
#include "core/data/corpus.h"
#include "core/data/rng.h"
#include "core/data/tokenizer_backend.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;
namespace {

static_assert(sizeof(int) == sizeof(int32_t), "SentencePiece ids are int; retort stores them as int32");

// SentencePiece drops training sentences longer than its max_sentence_length, so long documents are fed
// in pieces. Its BPE counts whitespace-delimited words, so cutting at line ends loses almost nothing.
constexpr size_t kMaxTrainingSentenceBytes = 16384;

// Start of the last UTF-8 character boundary at or before `limit`, so a cut never splits a character.
size_t utf8_boundary_at_or_before(std::string_view text, size_t limit) {
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut > 0 ? cut : limit;
}

void append_training_sentences(std::string_view document, std::vector<std::string_view>& sentences) {
  while (document.size() > kMaxTrainingSentenceBytes) {
    size_t cut = document.rfind('\n', kMaxTrainingSentenceBytes - 1);
    cut = cut == std::string_view::npos ? utf8_boundary_at_or_before(document, kMaxTrainingSentenceBytes) : cut + 1;
    sentences.push_back(document.substr(0, cut));
    document.remove_prefix(cut);
  }
  if (!document.empty()) sentences.push_back(document);
}

// The documents that train the tokenizer: all of them within the byte budget, else a seeded sample, kept in
// corpus order so that the sample, not the order, is what the seed changes.
std::vector<std::string_view> training_sentences(std::span<const std::string> documents,
                                                 const TokenizerTrainOptions& options) {
  int64_t total_bytes = 0;
  for (const std::string& document : documents) total_bytes += static_cast<int64_t>(document.size());
  std::vector<size_t> chosen(documents.size());
  std::iota(chosen.begin(), chosen.end(), size_t{0});
  if (total_bytes > options.max_training_bytes) {
    SplitMix64 rng(derive_seed(options.seed, /*stream=*/0x70CE));
    seeded_shuffle(std::span<size_t>(chosen), rng);
    int64_t budget = options.max_training_bytes;
    size_t keep = 0;
    while (keep < chosen.size() && budget > 0) budget -= static_cast<int64_t>(documents[chosen[keep++]].size());
    chosen.resize(keep);
    std::sort(chosen.begin(), chosen.end());
    spdlog::info("tokenizer: corpus has {} bytes; training on a seeded sample of {} of {} documents", total_bytes, keep,
                 documents.size());
  }
  std::vector<std::string_view> sentences;
  for (const size_t index : chosen) append_training_sentences(documents[index], sentences);
  return sentences;
}

class SentenceList : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceList(const std::vector<std::string_view>& sentences) : sentences_(sentences) { load_current(); }
  bool done() const override { return index_ >= sentences_.size(); }
  void Next() override {
    ++index_;
    load_current();
  }
  const std::string& value() const override { return current_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load_current() {
    if (!done()) current_.assign(sentences_[index_]);
  }
  const std::vector<std::string_view>& sentences_;
  size_t index_ = 0;
  std::string current_;
};

std::unordered_map<std::string, std::string> trainer_arguments(int64_t vocab_size, TokenizerModelType type) {
  return {
      {"model_type", tokenizer_model_type_name(type)},
      {"vocab_size", std::to_string(vocab_size)},
      {"hard_vocab_limit", "true"},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(kMaxTrainingSentenceBytes)},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      // Errors still come back through the returned status; this silences SentencePiece's own chatter.
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
}

// SentencePiece's stand-in for a space inside pieces, U+2581.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// A SentencePiece model (retort's own, or one given as data.tokenizer).
class SentencePieceBackend final : public TokenizerBackend {
 public:
  SentencePieceBackend(const std::string& model_bytes, const fs::path& path)
      : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(path) {
    const auto status = processor_->LoadFromSerializedProto(model_bytes);
    RETORT_INPUT_CHECK(status.ok(), "'{}' is not a SentencePiece model ({}): train a tokenizer with retort first",
                       path_.string(), status.ToString());
  }
  void encode(std::string_view text, bool, std::vector<int32_t>& ids,
              std::vector<CharOffsets>* offsets) const override {
    if (!offsets) {
      std::vector<int> out;
      const auto status = processor_->Encode(text, &out);
      check(status, text);
      ids.insert(ids.end(), out.begin(), out.end());
      return;
    }
    sentencepiece::ImmutableSentencePieceText spt;
    const auto status = processor_->Encode(text, spt.mutable_proto());
    check(status, text);
    spt.ConvertToUnicodeSpans();
    for (const auto& piece : spt.pieces()) {
      ids.push_back(static_cast<int32_t>(piece.id()));
      offsets->push_back({piece.begin(), piece.end()});
    }
  }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string text;
    const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    RETORT_CHECK(status.ok(), "tokenizer '{}' failed to decode {} ids: {}", path_.string(), ids.size(),
                 status.ToString());
    return text;
  }
  std::string piece(int32_t id) const override { return processor_->IdToPiece(id); }
  std::string token_bytes(int32_t id) const override {
    if (is_special(id)) return {};
    const std::string& piece = processor_->IdToPiece(id);
    if (processor_->IsByte(id)) {
      // "<0xNN>": the byte is the two hex digits.
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    }
    std::string bytes;
    bytes.reserve(piece.size());
    for (size_t at = 0; at < piece.size();) {
      if (piece.compare(at, kSpaceMarker.size(), kSpaceMarker) == 0) {
        bytes += ' ';
        at += kSpaceMarker.size();
      } else {
        bytes += piece[at++];
      }
    }
    return bytes;
  }
  bool is_special(int32_t id) const override {
    return processor_->IsControl(id) || processor_->IsUnknown(id) || processor_->IsUnused(id);
  }
  int64_t vocab_size() const override { return processor_->GetPieceSize(); }
  const char* kind() const override { return "sentencepiece"; }
  int32_t eos_id() const { return processor_->eos_id(); }

 private:
  void check(const sentencepiece::util::Status& status, std::string_view text) const {
    RETORT_CHECK(status.ok(), "tokenizer '{}' failed to encode {} bytes of text: {}", path_.string(), text.size(),
                 status.ToString());
  }
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  fs::path path_;
};

// A Hugging Face tokenizer.json.
class ByteLevelBpeBackend final : public TokenizerBackend {
 public:
  ByteLevelBpeBackend(std::string_view json_text, const fs::path& path) : bpe_(json_text, path.string()) {}
  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids,
              std::vector<CharOffsets>* offsets) const override {
    bpe_.encode(text, add_special_tokens, ids, offsets);
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    return bpe_.decode(ids, skip_special_tokens);
  }
  std::string piece(int32_t id) const override { return bpe_.token(id); }
  std::string token_bytes(int32_t id) const override { return bpe_.token_bytes(id); }
  bool is_special(int32_t id) const override { return bpe_.is_special(id) || !bpe_.is_used(id); }
  int64_t vocab_size() const override { return bpe_.vocab_size(); }
  const char* kind() const override { return "tokenizer.json"; }
  const ByteLevelBpe& bpe() const { return bpe_; }

 private:
  ByteLevelBpe bpe_;
};

constexpr const char* kTokenizerConfigName = "tokenizer_config.json";

// The eos token of a tokenizer.json: tokenizer_config.json's "eos_token" beside it, else a known name.
std::string choose_eos_token(const ByteLevelBpe& bpe, const fs::path& path) {
  const fs::path config_path = path.parent_path() / kTokenizerConfigName;
  if (fs::is_regular_file(config_path)) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& error) {
      throw InputError(fmt::format("'{}' is not valid JSON ({}): it names the eos token of '{}'; fix or remove it",
                                   config_path.string(), error.what(), path.string()));
    }
    const nlohmann::json eos = config.value("eos_token", nlohmann::json());
    std::string name;
    if (eos.is_string()) name = eos.get<std::string>();
    if (eos.is_object() && eos.contains("content")) name = eos.at("content").get<std::string>();
    if (!name.empty()) {
      RETORT_INPUT_CHECK(bpe.token_id(name).has_value(),
                         "'{}' names the eos token \"{}\", which the tokenizer '{}' does not have: fix its "
                         "\"eos_token\", or remove the file to use the tokenizer's own <|endoftext|>, <|end_of_text|> "
                         "or </s>",
                         config_path.string(), name, path.string());
      return name;
    }
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (bpe.token_id(name)) return name;
  }
  throw InputError(fmt::format(
      "the tokenizer '{}' has no end-of-document token, which retort uses to separate documents: it has none of "
      "<|endoftext|>, <|end_of_text|>, </s>; put a {} with \"eos_token\": \"...\" naming one of its tokens beside it",
      path.string(), kTokenizerConfigName));
}

bool is_tokenizer_json(const fs::path& path, std::string_view bytes) {
  if (path.extension() == ".json") return true;
  if (path.extension() == ".model") return false;
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

}  // namespace

const char* tokenizer_model_type_name(TokenizerModelType type) {
  return type == TokenizerModelType::kUnigram ? "unigram" : "bpe";
}

TokenizerModelType parse_tokenizer_model_type(std::string_view name, std::string_view key) {
  if (name == "bpe") return TokenizerModelType::kBpe;
  if (name == "unigram") return TokenizerModelType::kUnigram;
  throw InputError(fmt::format("{} = '{}' is not a tokenizer type: give bpe or unigram", key, name));
}

Tokenizer::Tokenizer(std::string model_bytes, fs::path model_path) : model_path_(std::move(model_path)) {
  if (is_tokenizer_json(model_path_, model_bytes)) {
    auto backend = std::make_unique<ByteLevelBpeBackend>(model_bytes, model_path_);
    const std::string eos = choose_eos_token(backend->bpe(), model_path_);
    eos_id_ = *backend->bpe().token_id(eos);
    ContentHash hash;
    hash.update(model_bytes);
    hash.update("\neos_token=" + eos);
    fingerprint_ = hash.hex();
    backend_ = std::move(backend);
  } else {
    auto backend = std::make_unique<SentencePieceBackend>(model_bytes, model_path_);
    eos_id_ = backend->eos_id();
    fingerprint_ = content_hash_hex(model_bytes);
    backend_ = std::move(backend);
  }
  vocab_size_ = backend_->vocab_size();
  RETORT_INPUT_CHECK(eos_id_ >= 0 && eos_id_ < vocab_size_,
                     "tokenizer '{}' has no end-of-document (</s>) piece, which retort uses to separate documents: "
                     "use a tokenizer trained by retort",
                     model_path_.string());
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::train(std::span<const std::string> documents, const TokenizerTrainOptions& options) {
  RETORT_INPUT_CHECK(!options.model_path.empty(), "tokenizer training needs a model path to write to");
  RETORT_INPUT_CHECK(options.vocab_size >= 260 && options.vocab_size <= std::numeric_limits<int32_t>::max(),
                     "tokenizer vocab size {} is out of range: it needs at least 260 ids (256 byte pieces, <unk>, "
                     "</s> and a few merges)",
                     options.vocab_size);
  const std::vector<std::string_view> sentences = training_sentences(documents, options);
  RETORT_INPUT_CHECK(!sentences.empty(), "cannot train a tokenizer for '{}': the corpus has no text",
                     options.model_path.string());

  const auto start = std::chrono::steady_clock::now();
  SentenceList iterator(sentences);
  std::string model_bytes;
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      trainer_arguments(options.vocab_size, options.model_type), &iterator, &model_bytes);
  RETORT_INPUT_CHECK(status.ok(),
                     "training the tokenizer '{}' ({}, vocab size {}) failed: {}. If the vocabulary is too large "
                     "for this corpus, lower the vocab size or give more text",
                     options.model_path.string(), tokenizer_model_type_name(options.model_type), options.vocab_size,
                     status.ToString());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (options.model_path.has_parent_path()) fs::create_directories(options.model_path.parent_path());
  write_file_atomic(options.model_path, model_bytes);
  Tokenizer tokenizer(std::move(model_bytes), options.model_path);
  spdlog::info("tokenizer: trained {} vocab {} on {} sentences in {:.1f} s -> {} (fingerprint {})",
               tokenizer_model_type_name(options.model_type), tokenizer.vocab_size(), sentences.size(), seconds,
               options.model_path.string(), tokenizer.fingerprint());
  return tokenizer;
}

Tokenizer Tokenizer::train_on_files(const std::vector<fs::path>& files, const TokenizerTrainOptions& options) {
  return train(read_documents(files), options);
}

Tokenizer Tokenizer::load(const fs::path& model_path) {
  return Tokenizer(read_file(model_path), model_path);
}

Tokenizer open_tokenizer_file(const fs::path& path) {
  RETORT_INPUT_CHECK(fs::is_regular_file(path),
                     "the tokenizer file '{}' does not exist: give the path of a SentencePiece .model file or a "
                     "Hugging Face tokenizer.json",
                     path.string());
  const std::string type = path.extension().string();
  RETORT_INPUT_CHECK(type == ".model" || type == ".json",
                     "the tokenizer file '{}' is of a type retort cannot read ('{}'): give a SentencePiece .model "
                     "file or a Hugging Face tokenizer.json",
                     path.string(), type);
  return Tokenizer::load(path);
}

std::string tokenizer_copy_name(const fs::path& path) {
  return path.extension() == ".json" ? "tokenizer.json" : "tokenizer.model";
}

fs::path copy_tokenizer_file(const fs::path& path, const fs::path& folder) {
  const fs::path copy = folder / tokenizer_copy_name(path);
  fs::create_directories(folder);
  write_file_atomic(copy, read_file(path));
  if (path.extension() == ".json") {
    const fs::path config = path.parent_path() / kTokenizerConfigName;
    if (fs::is_regular_file(config)) {
      const fs::path target = folder / kTokenizerConfigName;
      if (!fs::exists(target) || !fs::equivalent(config, target)) {
        write_file_atomic(target, read_file(config));
      }
    } else {
      fs::remove(folder / kTokenizerConfigName);
    }
  }
  return copy;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  backend_->encode(text, add_special_tokens, ids, nullptr);
  return ids;
}

TokenizedText Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  TokenizedText out;
  backend_->encode(text, add_special_tokens, out.ids, &out.offsets);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    RETORT_INPUT_CHECK(ids[i] >= 0 && ids[i] < vocab_size_,
                       "cannot decode token id {} at position {}: tokenizer '{}' has ids 0..{}", ids[i], i,
                       model_path_.string(), vocab_size_ - 1);
  }
  return backend_->decode(ids, skip_special_tokens);
}

std::string Tokenizer::piece(int32_t id) const {
  RETORT_INPUT_CHECK(id >= 0 && id < vocab_size_, "token id {} is outside tokenizer '{}' (ids 0..{})", id,
                     model_path_.string(), vocab_size_ - 1);
  return backend_->piece(id);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  RETORT_INPUT_CHECK(id >= 0 && id < vocab_size_, "token id {} is outside tokenizer '{}' (ids 0..{})", id,
                     model_path_.string(), vocab_size_ - 1);
  return backend_->token_bytes(id);
}

bool Tokenizer::is_special(int32_t id) const {
  RETORT_INPUT_CHECK(id >= 0 && id < vocab_size_, "token id {} is outside tokenizer '{}' (ids 0..{})", id,
                     model_path_.string(), vocab_size_ - 1);
  return backend_->is_special(id);
}

const char* Tokenizer::kind() const {
  return backend_->kind();
}

}  // namespace retort::data
