#include "distill/train/token_bytes.h"

#include <cctype>
#include <string>

namespace retort::distill {

namespace {

bool looks_like_byte_piece(const std::string& piece) {
  return piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' &&
         std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4]));
}

}  // namespace

std::vector<int32_t> utf8_bytes_per_token(const data::Tokenizer& tokenizer) {
  std::vector<int32_t> bytes(static_cast<size_t>(tokenizer.vocab_size()), 0);
  for (int32_t id = 0; id < static_cast<int32_t>(tokenizer.vocab_size()); ++id) {
    if (id == tokenizer.eos_id()) continue;
    const std::string piece = tokenizer.piece(id);
    if (piece == "<unk>") continue;  // decodes to a placeholder (" ⁇ "), not to text of the documents
    const int32_t one[] = {id};
    const std::string text = tokenizer.decode(one);
    // A byte-fallback piece decodes to its byte (or, alone, to U+FFFD); a text piece that happens to read
    // "<0x41>" decodes to itself.
    if (looks_like_byte_piece(piece) && text != piece) {
      bytes[static_cast<size_t>(id)] = 1;
      continue;
    }
    bytes[static_cast<size_t>(id)] = static_cast<int32_t>(text.size());  // control pieces decode to ""
  }
  return bytes;
}

int64_t utf8_bytes_of(std::span<const int32_t> ids, const std::vector<int32_t>& bytes_per_token) {
  int64_t total = 0;
  for (int32_t id : ids)
    if (id >= 0 && static_cast<size_t>(id) < bytes_per_token.size()) total += bytes_per_token[static_cast<size_t>(id)];
  return total;
}

}  // namespace retort::distill
