#include "core/data/nfc_alignment.h"

#include <unicode/bytestream.h>
#include <unicode/edits.h>
#include <unicode/normalizer2.h>

#include "core/util/error.h"

namespace retort::data {
namespace {

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The characters of a UTF-8 span as [begin, end) byte ranges.
std::vector<std::pair<uint32_t, uint32_t>> characters(std::string_view text, uint32_t base) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(text[at])), text.size() - at);
    out.emplace_back(base + at, base + at + n);
    at += n;
  }
  return out;
}

}  // namespace

AlignedText nfc_with_alignment(std::string_view source) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  RETORT_CHECK(U_SUCCESS(status), "ICU has no NFC normalizer: {}", u_errorName(status));
  const icu::StringPiece piece(source.data(), static_cast<int32_t>(source.size()));
  AlignedText out;
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.text.assign(source);
    return out;
  }
  status = U_ZERO_ERROR;
  icu::Edits edits;
  icu::StringByteSink<std::string> sink(&out.text);
  nfc->normalizeUTF8(0, piece, sink, &edits, status);
  RETORT_CHECK(U_SUCCESS(status), "NFC normalization of {} bytes failed: {}", source.size(), u_errorName(status));
  out.origin.resize(out.text.size());
  icu::Edits::Iterator it = edits.getFineIterator();
  while (it.next(status)) {
    const auto old_begin = static_cast<uint32_t>(it.sourceIndex());
    const auto new_begin = static_cast<uint32_t>(it.destinationIndex());
    const auto old_chars = characters(source.substr(old_begin, it.oldLength()), old_begin);
    const auto new_chars = characters(std::string_view(out.text).substr(new_begin, it.newLength()), new_begin);
    if (!it.hasChange()) {
      for (size_t i = 0; i < new_chars.size(); ++i) {
        for (uint32_t b = new_chars[i].first; b < new_chars[i].second; ++b) out.origin[b] = old_chars[i];
      }
      continue;
    }
    // A changed span: its first character takes the first source character; each later one takes the next
    // unused source character equal to it (a combining mark left over after a composition), else its
    // predecessor's.
    size_t next_old = 1;
    std::pair<uint32_t, uint32_t> previous =
        old_chars.empty() ? std::pair<uint32_t, uint32_t>{old_begin, old_begin} : old_chars.front();
    for (size_t i = 0; i < new_chars.size(); ++i) {
      std::pair<uint32_t, uint32_t> origin = previous;
      if (i > 0) {
        const std::string_view ch =
            std::string_view(out.text).substr(new_chars[i].first, new_chars[i].second - new_chars[i].first);
        for (size_t j = next_old; j < old_chars.size(); ++j) {
          if (source.substr(old_chars[j].first, old_chars[j].second - old_chars[j].first) == ch) {
            origin = old_chars[j];
            next_old = j + 1;
            break;
          }
        }
      }
      for (uint32_t b = new_chars[i].first; b < new_chars[i].second; ++b) out.origin[b] = origin;
      previous = origin;
    }
  }
  return out;
}

}  // namespace retort::data
