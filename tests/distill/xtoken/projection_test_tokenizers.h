#pragma once
// Small byte-level BPE tokenizers written by hand for the vocabulary projection tests, so every row of the
// projection can be worked out on paper: ids 0..255 are the 256 bytes in byte order, then one id per merge in merge
// order, then the added tokens.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_support.h"

namespace retort::distill::xtoken::testing {

// GPT-2's printable stand-in of a byte (written here from its definition: bytes 33-126, 161-172 and 174-255 are
// themselves, the others take code points 256, 257, ... in byte order), as UTF-8.
inline std::string stand_in(unsigned char byte) {
  char32_t next = 256, code = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t c = printable ? static_cast<char32_t>(b) : next++;
    if (b == byte) code = c;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

struct AddedToken {
  std::string content;
  bool special = true;
};

// Writes `folder`/tokenizer.json: the byte tokens, one token per merge (ASCII text without spaces), then the added
// tokens; returns its path.
inline std::filesystem::path write_bpe_tokenizer(const std::filesystem::path& folder,
                                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                                 const std::vector<AddedToken>& added) {
  nlohmann::json vocab = nlohmann::json::object(), merge_list = nlohmann::json::array();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[stand_in(static_cast<unsigned char>(b))] = id++;
  for (const auto& [left, right] : merges) {
    vocab[left + right] = id++;
    merge_list.push_back(left + " " + right);
  }
  nlohmann::json added_tokens = nlohmann::json::array();
  for (const AddedToken& token : added) {
    added_tokens.push_back({{"id", id++},
                            {"content", token.content},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", token.special}});
  }
  const nlohmann::json file{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
  const std::filesystem::path path = folder / "tokenizer.json";
  ::retort::testing::write_bytes(path, file.dump());
  return path;
}

}  // namespace retort::distill::xtoken::testing
