// The bytes each token stands for, from the tokenizer's piece of the token.
#include "distill/xtoken/canonical_strings.h"

#include <array>
#include <cstring>
#include <string_view>

namespace retort::distill::xtoken {
namespace {

// Byte-level BPE writes byte b as the character b when b is a printable Latin-1 byte (33..126, 161..172, 174..255)
// and as the character 256 + n for the n-th other byte in increasing order. Returns character -> byte, -1 if none.
std::array<int16_t, 512> byte_level_inverse() {
  std::array<int16_t, 512> inverse;
  inverse.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    inverse[size_t(printable ? b : next++)] = int16_t(b);
  }
  return inverse;
}

// The code points of valid UTF-8; false for anything else.
bool decode_utf8(std::string_view text, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    const int len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (len == 0 || at + size_t(len) > text.size()) return false;
    uint32_t cp = len == 1 ? lead : lead & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(text[at + size_t(k)]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    out.push_back(cp);
    at += size_t(len);
  }
  return true;
}

// "<0xNN>" -> NN; -1 otherwise.
int byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::vector<std::string> canonical_token_strings(const data::Tokenizer& tokenizer, const SideTokens& side) {
  static const std::array<int16_t, 512> inverse = byte_level_inverse();
  const bool sentencepiece = std::strcmp(tokenizer.kind(), "sentencepiece") == 0;
  constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::vector<std::string> out(side.ids.size());
  std::vector<uint32_t> code_points;
  for (size_t k = 0; k < side.ids.size(); ++k) {
    if (side.roles[k] != SpecialRole::kNone) continue;
    const std::string piece = tokenizer.piece(side.ids[k]);
    std::string& bytes = out[k];
    if (sentencepiece) {
      if (const int b = byte_piece(piece); b >= 0) {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      for (size_t at = 0; at < piece.size();) {
        if (piece.compare(at, kSpaceMarker.size(), kSpaceMarker) == 0) {
          bytes.push_back(' ');
          at += kSpaceMarker.size();
        } else {
          bytes.push_back(piece[at++]);
        }
      }
      continue;
    }
    // A byte-level token maps back byte by byte; an added token (its content as written, e.g. "<think>") has
    // characters outside the stand-ins and is its own text.
    bool stand_ins = decode_utf8(piece, code_points);
    for (const uint32_t cp : code_points) stand_ins = stand_ins && cp < inverse.size() && inverse[cp] >= 0;
    if (!stand_ins) {
      bytes = piece;
      continue;
    }
    for (const uint32_t cp : code_points) bytes.push_back(static_cast<char>(inverse[cp]));
  }
  return out;
}

}  // namespace retort::distill::xtoken
