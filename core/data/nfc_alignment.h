#pragma once
// Unicode NFC normalization that remembers where each normalized character came from, so token offsets can be
// given in the caller's text (the tokenizer.json "NFC" normalizer). Alignment follows the Hugging Face tokenizers:
// a character composed from several (e + U+0301 -> é) maps to the first of them only, and a character kept as it
// was maps to itself.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace retort::data {

struct AlignedText {
  std::string text;
  // Empty when the text was already normalized (text == source, every byte maps to itself); otherwise, for each
  // byte of text, the byte range [first, second) in the source of the character it came from.
  std::vector<std::pair<uint32_t, uint32_t>> origin;
};

// `source` must be valid UTF-8.
AlignedText nfc_with_alignment(std::string_view source);

}  // namespace retort::data
