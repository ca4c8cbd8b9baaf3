#pragma once
// The framework's tokenizer: a SentencePiece model (BPE or unigram) that retort trains itself from a corpus, or a
// Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama-3, Qwen2/Qwen3; see byte_level_bpe.h) made elsewhere. Both
// kinds sit behind the same class, so data shards, generate, eval and the run's tokenizer copy take either.
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

#include "core/data/char_offsets.h"

namespace retort::data {

class TokenizerBackend;

// Ids with each id's [begin, end) in code points of the text.
struct TokenizedText {
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
};

// The SentencePiece algorithm a trained tokenizer uses. BPE merges the most frequent pairs; unigram starts from many
// candidate pieces and prunes those whose removal costs the corpus' likelihood least, then encodes each text as its
// most likely segmentation. The same text cut two ways is what cross-tokenizer distillation is tested on.
enum class TokenizerModelType { kBpe, kUnigram };

// "bpe" or "unigram".
const char* tokenizer_model_type_name(TokenizerModelType type);
// The type a name of tokenizer_model_type_name stands for; anything else is an InputError naming `key` (the config
// key that gave it) and the allowed values.
TokenizerModelType parse_tokenizer_model_type(std::string_view name, std::string_view key);

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
  // Both types share every choice above (identity normalization, byte fallback, <unk> 0, </s> 1).
  TokenizerModelType model_type = TokenizerModelType::kBpe;
};

class Tokenizer {
 public:
  // Same documents and options -> same model bytes, hence the same fingerprint.
  static Tokenizer train(std::span<const std::string> documents, const TokenizerTrainOptions& options);
  // The documents of the text files (see read_documents in corpus.h).
  static Tokenizer train_on_files(const std::vector<std::filesystem::path>& files,
                                  const TokenizerTrainOptions& options);
  // A SentencePiece .model, or a tokenizer.json (by its ".json" extension, or a file starting with '{'). The
  // end-of-document id of a tokenizer.json is its eos token: the "eos_token" of a tokenizer_config.json in the same
  // folder when there is one, else the first of <|endoftext|>, <|end_of_text|>, </s> it has; none is an InputError.
  static Tokenizer load(const std::filesystem::path& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The text's ids, without any special token a tokenizer.json's post-processor would add (with
  // add_special_tokens, a tokenizer.json's template adds them, e.g. Llama-3's <|begin_of_text|>; a SentencePiece
  // model adds none).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // The ids with their character (code point) offsets in the text, as Hugging Face tokenizers report them for a
  // tokenizer.json (SentencePiece: its own surface spans).
  TokenizedText encode_with_offsets(std::string_view text, bool add_special_tokens = false) const;
  // Ids outside [0, vocab_size) are an InputError naming the id. Special tokens of a tokenizer.json decode to their
  // text unless skip_special_tokens (SentencePiece's control pieces, </s>, always decode to nothing).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // The piece text of one id (byte pieces read "<0x0A>"; tokenizer.json tokens as the file writes them, "Ġthe"),
  // for logs and debugging.
  std::string piece(int32_t id) const;
  // The exact UTF-8 bytes the id stands for inside a text, so that concatenating token_bytes over encode(text) gives
  // the text back byte for byte (what a cross-tokenizer map compares, and what bits per byte counts):
  //  - SentencePiece: the piece with U+2581 read as a space; a byte-fallback piece (<0xNN>) its single byte; the
  //    control pieces (</s>, <s>, <pad>) and <unk> nothing. Unlike decode({id}), no leading space is dropped for a
  //    model with a dummy prefix, and a lone byte is not replaced by U+FFFD.
  //  - tokenizer.json: the token's bytes after the ByteLevel decoder (possibly part of one UTF-8 character, never
  //    replaced by U+FFFD); special added tokens nothing (a non-special added token is its text); an id no token
  //    has (a hole in the file's ids) nothing.
  // An id outside [0, vocab_size) is an InputError naming it.
  std::string token_bytes(int32_t id) const;
  // True when the id stands for no text of a document: SentencePiece's control pieces and <unk>, a tokenizer.json's
  // special added tokens and the ids no token has. Such ids have empty token_bytes; the converse need not hold.
  bool is_special(int32_t id) const;
  // "sentencepiece" or "tokenizer.json".
  const char* kind() const;

  int64_t vocab_size() const { return vocab_size_; }
  int32_t eos_id() const { return eos_id_; }
  // A stable hash of the model file's bytes (16 hex digits; for a tokenizer.json, with its eos token); caches made
  // with this tokenizer record it.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::filesystem::path& model_path() const { return model_path_; }

 private:
  Tokenizer(std::string model_bytes, std::filesystem::path model_path);

  std::unique_ptr<TokenizerBackend> backend_;
  std::filesystem::path model_path_;
  std::string fingerprint_;
  int64_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
};

// A tokenizer file made elsewhere (data.tokenizer), opened by its type: a SentencePiece model (".model") or a Hugging
// Face tokenizer.json (".json"). Any other type is an InputError naming the types retort reads.
Tokenizer open_tokenizer_file(const std::filesystem::path& path);

// The name a copy of the tokenizer file takes in a folder (a data folder, a run): tokenizer.json for a
// tokenizer.json, else tokenizer.model.
std::string tokenizer_copy_name(const std::filesystem::path& path);

// Copies the tokenizer file into `folder` under tokenizer_copy_name, with, for a tokenizer.json, the
// tokenizer_config.json beside it (which names its eos token; a stale one in `folder` is removed when the source has
// none), so the copy loads as the same tokenizer. Atomic writes; returns the copy's path.
std::filesystem::path copy_tokenizer_file(const std::filesystem::path& path, const std::filesystem::path& folder);

}  // namespace retort::data
