// A tokenizer's character offsets as byte spans, and a side of an alignment from a tokenizer's encoding.
#include "distill/xtoken/tokenizer_spans.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/util/error.h"
#include "distill/xtoken/canonical_strings.h"
#include "distill/xtoken/token_clusters.h"

namespace retort::distill::xtoken {
namespace {

// Bytes of a UTF-8 sequence from its lead byte; 0 for a byte that cannot lead one.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Byte offset of every code point of a valid UTF-8 text, plus the text's size at the end.
std::vector<int64_t> code_point_starts(std::string_view text) {
  std::vector<int64_t> starts;
  starts.reserve(text.size() + 1);
  size_t at = 0;
  while (at < text.size()) {
    const int len = sequence_length(static_cast<unsigned char>(text[at]));
    bool valid = len > 0 && at + size_t(len) <= text.size();
    for (int k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(text[at + size_t(k)]) & 0xC0) == 0x80;
    if (!valid) {
      throw InputError(
          fmt::format("the text is not valid UTF-8 at byte {}: pass it through "
                      "data::utf8_with_replacement before tokenizing and aligning",
                      at));
    }
    starts.push_back(static_cast<int64_t>(at));
    at += size_t(len);
  }
  starts.push_back(static_cast<int64_t>(text.size()));
  return starts;
}

}  // namespace

std::vector<ByteSpan> byte_spans_from_char_offsets(std::string_view text, std::span<const data::CharOffsets> offsets) {
  const std::vector<int64_t> starts = code_point_starts(text);
  const auto characters = static_cast<int64_t>(starts.size() - 1);
  std::vector<ByteSpan> spans;
  spans.reserve(offsets.size());
  for (size_t k = 0; k < offsets.size(); ++k) {
    const data::CharOffsets& o = offsets[k];
    if (o.begin < 0 || o.end < o.begin || o.end > characters) {
      throw InputError(
          fmt::format("token {} has the character offsets [{}, {}), outside the text's {} characters: "
                      "the offsets are not of this text",
                      k, o.begin, o.end, characters));
    }
    spans.push_back({starts[size_t(o.begin)], starts[size_t(o.end)]});
  }
  return spans;
}

SideTokens side_tokens(const data::Tokenizer& tokenizer, std::string_view text, bool add_special_tokens) {
  data::TokenizedText encoded = tokenizer.encode_with_offsets(text, add_special_tokens);
  SideTokens side;
  side.spans = byte_spans_from_char_offsets(text, encoded.offsets);
  side.roles.assign(encoded.ids.size(), SpecialRole::kNone);
  // SentencePiece adds no special token, and gives the second and later byte pieces of one character an empty
  // span: those are text. A tokenizer.json's post-processor specials are the only empty spans it gives.
  const bool sentencepiece = std::string_view(tokenizer.kind()) == "sentencepiece";
  for (size_t k = 0; k < encoded.ids.size(); ++k) {
    if (sentencepiece ? encoded.ids[k] != tokenizer.eos_id() : side.spans[k].begin != side.spans[k].end) continue;
    side.roles[k] = encoded.ids[k] == tokenizer.eos_id() ? SpecialRole::kEos
                    : k == 0                             ? SpecialRole::kBos
                                                         : SpecialRole::kOther;
  }
  side.ids = std::move(encoded.ids);
  // Normalised tokens: a cluster of text tokens with overlapping spans (the pieces of one character) must spell the
  // text's bytes of the cluster; where it does not, the tokenizer read other bytes there.
  const std::vector<std::string> strings = canonical_token_strings(tokenizer, side);
  side.altered.assign(side.ids.size(), 0);
  bool any = false;
  std::string spelled;
  for (size_t k = 0; k < side.ids.size();) {
    if (side.roles[k] != SpecialRole::kNone) {
      ++k;
      continue;
    }
    size_t last = k + 1;
    int64_t begin = side.spans[k].begin, end = side.spans[k].end;
    spelled = strings[k];
    while (last < side.ids.size() && side.roles[last] == SpecialRole::kNone &&
           joins_cluster(begin, end, side.spans[last])) {
      begin = std::min(begin, side.spans[last].begin);
      end = std::max(end, side.spans[last].end);
      spelled += strings[last++];
    }
    if (text.substr(size_t(begin), size_t(end - begin)) != spelled) {
      std::fill(side.altered.begin() + static_cast<ptrdiff_t>(k), side.altered.begin() + static_cast<ptrdiff_t>(last),
                uint8_t{1});
      any = true;
    }
    k = last;
  }
  if (!any) side.altered.clear();
  return side;
}

}  // namespace retort::distill::xtoken
