#pragma once
// Bits per byte: a model's loss per UTF-8 byte of text rather than per token, so models with different tokenizers
// (or a vocabulary grown from 8k to 32k) are compared on the same scale. bits/byte = the scored tokens' total
// nats / ln 2 / the UTF-8 bytes of the text those tokens stand for.
// What one token stands for:
//   - a text piece: its decoded text ("▁the" is " the": 4 bytes);
//   - a byte-fallback piece (<0xE2>): exactly one byte, so the three pieces of a character outside the
//     vocabulary count its three UTF-8 bytes;
//   - the end-of-document token (</s>) and other control pieces (<unk>, <s>, <pad>): no bytes. They stand for no
//     text of the documents; their loss still counts (predicting where a document ends is part of the task), so
//     a corpus of many short documents reads slightly worse per byte than the same text as one document.
//   - a tokenizer.json token: its decoded bytes, also when they are part of one UTF-8 character (decoded alone such a
//     token reads U+FFFD, 3 bytes); special tokens (<|endoftext|>, <|im_start|>) no bytes.
// That is data::Tokenizer::token_bytes. The sum over a token stream is therefore the byte size of the stream decoded
// document by document.
#include <cstdint>
#include <span>
#include <vector>

#include "core/data/tokenizer.h"

namespace retort::distill {

// The UTF-8 bytes each token id stands for, indexed by id (vocab_size entries).
std::vector<int32_t> utf8_bytes_per_token(const data::Tokenizer& tokenizer);

// Sum of bytes_per_token over `ids` (ids outside the table, such as an ignore_index, count nothing).
int64_t utf8_bytes_of(std::span<const int32_t> ids, const std::vector<int32_t>& bytes_per_token);

}  // namespace retort::distill
