#pragma once
// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2, Llama-3, Qwen2/Qwen3), giving the
// ids, character offsets and decoded text that the Hugging Face tokenizers give.
//
// What the file may hold (anything else is an InputError naming the JSON key and its value):
//  - model: BPE with vocab and merges ("a b" strings or ["a", "b"] pairs), ignore_merges, no dropout, no
//    byte_fallback, no continuing_subword_prefix or end_of_word_suffix;
//  - normalizer: none or NFC (alone or in a Sequence);
//  - pre_tokenizer: Split {Regex or String pattern, behavior Isolated, invert false} steps followed by one
//    ByteLevel {add_prefix_space false}, alone or in a Sequence; ByteLevel use_regex true splits with GPT-2's
//    pattern first;
//  - post_processor: none, ByteLevel (trim_offsets), TemplateProcessing (its single template), or a Sequence of
//    them; added special tokens only with encode(..., add_special_tokens = true);
//  - decoder: ByteLevel;
//  - added_tokens: split out of the text before anything else, longest match first, with lstrip, rstrip and
//    single_word; normalized added tokens only without a normalizer.
//
// Encoding: added tokens first; then each stretch between them is normalized, split by the pre-tokenizer's
// patterns (PCRE2, UTF + UCP), mapped byte by byte to the printable stand-ins of GPT-2 and merged by rank. Text
// that is not valid UTF-8 first has each ill-formed sequence replaced by U+FFFD, as a UTF-8 reader with
// replacement does; offsets then count the characters of the replaced text.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/data/char_offsets.h"
#include "core/data/pcre2_regex.h"

namespace retort::data {

// GPT-2's byte -> code point table: bytes 33-126, 161-172 and 174-255 stand for themselves, the others take
// 256, 257, ... in byte order (so the space, 32, reads 'Ġ' = U+0120).
const std::array<char32_t, 256>& byte_to_unicode();

// Replaces each ill-formed UTF-8 sequence (its maximal subpart) by U+FFFD; valid text comes back unchanged.
std::string utf8_with_replacement(std::string_view bytes);

// The split pattern a ByteLevel pre-tokenizer with use_regex true implies (GPT-2's).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelBpe {
 public:
  // `origin` names the file in messages.
  ByteLevelBpe(std::string_view json_text, const std::string& origin);
  ~ByteLevelBpe();
  static std::unique_ptr<ByteLevelBpe> read(const std::filesystem::path& path);

  // Appends the ids (and, when offsets is given, each id's [begin, end) in code points of the text; 0, 0 for the
  // post-processor's special tokens).
  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids,
              std::vector<CharOffsets>* offsets = nullptr) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Ids outside [0, vocab_size) or unused are an InputError naming the id.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Highest id + 1 (the vocabulary with the added tokens).
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // The token's text as the file writes it (byte-level stand-ins, or an added token's content).
  const std::string& token(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  // Whether some token has the id (a file's ids may leave holes).
  bool is_used(int32_t id) const { return id >= 0 && id < vocab_size() && used_[id]; }
  // The bytes the id stands for in text: the ByteLevel decoder's bytes of a token (possibly part of one UTF-8
  // character), an added token's text; nothing for a special added token or an id no token has.
  std::string token_bytes(int32_t id) const;
  const std::string& origin() const { return origin_; }

  // The rank and merged id of the pair (left, right), or nothing when the merges do not list it.
  std::optional<std::pair<int32_t, int32_t>> merge_of(int32_t left, int32_t right) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false, single_word = false, lstrip = false, rstrip = false;
  };
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct TemplateItem {
    bool is_text = false;  // the sequence itself; else special ids
    std::vector<int32_t> ids;
  };
  struct PostStep {
    bool trim_offsets = false;  // ByteLevel
    bool add_prefix_space = false;
    bool is_template = false;
    std::vector<TemplateItem> single;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  class WordCache;

  void read_model(const nlohmann::json& model);
  void read_normalizer(const nlohmann::json& normalizer);
  void read_pre_tokenizer(const nlohmann::json& pre_tokenizer);
  void read_post_processor(const nlohmann::json& post, const std::string& key);
  void read_added_tokens(const nlohmann::json& added);
  void read_decoder(const nlohmann::json& decoder);

  // Encodes text with no added tokens in it; byte ranges are in `text`, shifted by base.
  void encode_stretch(std::string_view text, size_t base, std::vector<int32_t>& ids,
                      std::vector<std::pair<size_t, size_t>>* ranges) const;
  void encode_word(std::string_view bytes, std::vector<int32_t>& ids) const;
  void merge_word(std::string_view bytes, std::vector<int32_t>& ids) const;
  // The leftmost-longest added token at or after `from`: [begin, end) of the match (whitespace taken by
  // lstrip/rstrip included) and the token's index.
  std::optional<std::tuple<size_t, size_t, size_t>> find_added(std::string_view text, size_t from) const;
  uint64_t pair_key(int32_t left, int32_t right) const {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::string origin_;
  std::vector<std::string> tokens_;       // id -> the file's text of the token
  std::vector<std::string> token_bytes_;  // id -> the bytes it decodes to
  std::vector<uint8_t> used_;             // id -> 1 if some token has it
  std::vector<uint8_t> special_;          // id -> 1 for special added tokens
  StringMap token_ids_;                   // the file's text -> id
  StringMap vocab_by_bytes_;              // the model's vocabulary by decoded bytes
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<Pcre2Regex> splits_;
  std::vector<PostStep> post_;
  std::vector<AddedToken> added_;
  std::vector<std::string> normalized_added_;                 // keys of added tokens marked "normalized"
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  std::unique_ptr<WordCache> cache_;
};

}  // namespace retort::data
