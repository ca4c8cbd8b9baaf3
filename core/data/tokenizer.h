#pragma once
// The framework's tokenizer: a SentencePiece BPE model that retort trains itself from a corpus.
//
// Choices made for training (all recorded in the model file):
//  - identity normalization, no extra-whitespace removal, no dummy prefix: decode(encode(text)) == text
//    for every valid UTF-8 string, newlines and runs of spaces included;
//  - byte_fallback: characters never seen in training (or below the character coverage) encode as their
//    UTF-8 bytes (<0xNN> pieces), so any text encodes without <unk>;
//  - id 0 = <unk> (required by SentencePiece), id 1 = </s>, the end-of-document separator; no BOS/PAD;
//  - one trainer thread: SentencePiece stores its thread count in the model, so a fixed count keeps the
//    model bytes (and the fingerprint) identical across machines; BPE training is not faster with more.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace retort::data {

struct TokenizerTrainOptions {
  // Exact size of the trained vocabulary; a corpus too small to support it is an InputError that says the
  // largest size it supports. Must leave room for the 256 byte pieces and the corpus's characters.
  int64_t vocab_size = 8192;
  // Where the .model file is written (atomically; parent folders are created).
  std::filesystem::path model_path;
  // Picks which documents train the tokenizer when the corpus exceeds max_training_bytes; a corpus within
  // the budget is used whole and the seed has no effect.
  uint64_t seed = 0;
  int64_t max_training_bytes = int64_t{256} << 20;
};

class Tokenizer {
 public:
  // Same documents and options -> same model bytes, hence the same fingerprint.
  static Tokenizer train(std::span<const std::string> documents, const TokenizerTrainOptions& options);
  // The documents of the text files (see read_documents in corpus.h).
  static Tokenizer train_on_files(const std::vector<std::filesystem::path>& files,
                                  const TokenizerTrainOptions& options);
  static Tokenizer load(const std::filesystem::path& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  // Ids outside [0, vocab_size) are an InputError naming the id.
  std::string decode(std::span<const int32_t> ids) const;
  // The piece text of one id (byte pieces read "<0x0A>"), for logs and debugging.
  std::string piece(int32_t id) const;

  int64_t vocab_size() const { return vocab_size_; }
  int32_t eos_id() const { return eos_id_; }
  // A stable hash of the model file's bytes (16 hex digits); caches made with this tokenizer record it.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::filesystem::path& model_path() const { return model_path_; }

 private:
  Tokenizer(std::string model_bytes, std::filesystem::path model_path);

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::filesystem::path model_path_;
  std::string fingerprint_;
  int64_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
};

// A tokenizer file made elsewhere (data.tokenizer), opened by its type: a SentencePiece model (".model"). Any
// other type is an InputError naming the types retort reads; Hugging Face's tokenizer.json slots in here.
Tokenizer open_tokenizer_file(const std::filesystem::path& path);

}  // namespace retort::data
