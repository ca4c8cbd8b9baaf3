#pragma once
// What a kind of tokenizer file does behind data::Tokenizer (tokenizer.cpp): SentencePiece or tokenizer.json.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/char_offsets.h"

namespace retort::data {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Appends the ids; offsets, when given, receive one entry per id.
  virtual void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids,
                      std::vector<CharOffsets>* offsets) const = 0;
  // The ids are already checked against the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  virtual std::string piece(int32_t id) const = 0;
  // The id is already checked against the vocabulary. See Tokenizer::token_bytes and Tokenizer::is_special.
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual const char* kind() const = 0;
};

}  // namespace retort::data
