#include "distill/train/token_bytes.h"

namespace retort::distill {

std::vector<int32_t> utf8_bytes_per_token(const data::Tokenizer& tokenizer) {
  std::vector<int32_t> bytes(static_cast<size_t>(tokenizer.vocab_size()), 0);
  for (int32_t id = 0; id < static_cast<int32_t>(tokenizer.vocab_size()); ++id) {
    // Control pieces, <unk> and special tokens stand for no text: token_bytes gives them nothing.
    bytes[static_cast<size_t>(id)] = static_cast<int32_t>(tokenizer.token_bytes(id).size());
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
