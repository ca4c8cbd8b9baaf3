#pragma once
// One side of an alignment from a retort tokenizer: its character (code point) offsets turned into byte spans, and
// the roles of the tokens that stand for no text.
#include <span>
#include <string_view>
#include <vector>

#include "core/data/char_offsets.h"
#include "core/data/tokenizer.h"
#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {

// [begin, end) in code points -> [begin, end) in the UTF-8 bytes of `text`. The text must be valid UTF-8 (a
// tokenizer.json counts characters after replacing ill-formed bytes: pass data::utf8_with_replacement(text) to both
// the tokenizer and this); an offset past the text's characters is an InputError.
std::vector<ByteSpan> byte_spans_from_char_offsets(std::string_view text, std::span<const data::CharOffsets> offsets);

// The tokenizer's encoding of `text` as one side: ids, byte spans, and roles. For a tokenizer.json, a token with an
// empty span stands for no text (what its post-processor adds with add_special_tokens): the eos id is kEos, another
// such token kBos when it comes first, else kOther. A SentencePiece model's only special is its eos id (its later
// byte pieces of one character have empty spans but are text). Every other token is text (kNone), special tokens
// written in the text included. Tokens whose bytes (canonical_token_strings) are not the text's bytes of their span,
// a normalising tokenizer's, are marked altered.
SideTokens side_tokens(const data::Tokenizer& tokenizer, std::string_view text, bool add_special_tokens = false);

}  // namespace retort::distill::xtoken
