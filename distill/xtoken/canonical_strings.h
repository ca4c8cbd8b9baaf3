#pragma once
// Canonical token strings for the string alignment: the bytes each token stands for, whatever the tokenizer's way
// of writing them (a byte-level stand-in such as "Ġ" is its byte, SentencePiece's "▁" a space, "<0x0A>" the byte
// 0x0A). A character split over several tokens gives each token its own bytes, so the tokens' strings concatenate
// to the text. Specials (a role other than kNone) are empty.
#include <string>
#include <vector>

#include "core/data/tokenizer.h"
#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {

std::vector<std::string> canonical_token_strings(const data::Tokenizer& tokenizer, const SideTokens& side);

}  // namespace retort::distill::xtoken
