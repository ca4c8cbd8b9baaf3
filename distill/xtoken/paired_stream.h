#pragma once
// The same text read by two tokenizers, position by position: the student's prepared token shards (documents
// separated by the student's end-of-document id) and, made from them, the teacher's tokens of exactly the same
// text. Each student document is decoded to its bytes (the concatenated bytes of its tokens), encoded by the teacher
// tokenizer and written in the same document order with the teacher's end-of-document id after each document that
// had one. For both streams the byte position of every token in the concatenated text of the split is kept, so a
// student window of bytes [b0, b1) finds the teacher tokens covering it by binary search (xtoken_batch.h).
//
// Made once per (student shards, student tokenizer, teacher tokenizer) and kept in a folder:
//   paired.json                       what it was made from (fingerprints, the student splits' identities) and the
//                                     size and content hash of every file below
//   teacher_train_000.bin, _val_000   the teacher's tokens in llm.c's shard layout (core/data/token_shard.h)
//   {student,teacher}_{train,val}.offsets   int64 little-endian, tokens + 1 values: token i spans bytes
//                                     [offsets[i], offsets[i + 1]) of the split's text (an end-of-document id: an
//                                     empty span where its document ends)
// A folder made from other shards or another tokenizer is made again; a damaged one (a size or hash that differs) as
// well. A pair of tokenizers that cannot give back the same text is refused: every document's bytes are compared
// and the first that differs is named with the tokenizer that changed it.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/data/tokenizer.h"
#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {

// What each id of a tokenizer stands for: its bytes of text, and its role when it stands for none.
struct TokenTexts {
  std::vector<std::string> bytes;  // per id ("" for specials)
  std::vector<SpecialRole> roles;  // per id
  int32_t eos_id = -1;
  std::string name;  // for messages: the tokenizer's kind and file
};
TokenTexts token_texts(const data::Tokenizer& tokenizer);

// One split of the paired stream in memory.
struct PairedSplit {
  std::vector<int32_t> student_tokens;
  std::vector<int64_t> student_offsets;  // student_tokens.size() + 1
  std::vector<int32_t> teacher_tokens;
  std::vector<int64_t> teacher_offsets;  // teacher_tokens.size() + 1
  // Documents: index of each document's first token, then the stream's size (documents + 1 values). A document
  // holds its text's tokens and its end-of-document id; the two streams have the same documents.
  std::vector<int64_t> student_documents;
  std::vector<int64_t> teacher_documents;
  std::filesystem::path teacher_shard;  // the teacher tokens on disk (empty before they are written)

  int64_t bytes() const { return student_offsets.empty() ? 0 : student_offsets.back(); }
};

// The teacher's side of one student token stream (a whole split read in shard order), checked byte for byte.
// `split` names the split in messages. A document that the teacher tokenizer encodes to other bytes is an
// InputError naming the document, the byte where they part and the tokenizer.
PairedSplit pair_token_stream(std::span<const int32_t> student_tokens, const TokenTexts& student,
                              const data::Tokenizer& teacher, const TokenTexts& teacher_texts,
                              const std::string& split);

struct PairedStreamRequest {
  std::filesystem::path directory;
  std::vector<std::filesystem::path> student_train_shards;
  std::vector<std::filesystem::path> student_val_shards;  // may be empty: no validation split
  int64_t student_vocab = 0;                              // the shards' vocabulary (data.vocab_size)
  const data::Tokenizer* student = nullptr;
  const data::Tokenizer* teacher = nullptr;
};

struct PairedStream {
  std::filesystem::path directory;
  PairedSplit train, val;
  std::string student_fingerprint, teacher_fingerprint;
  int64_t teacher_vocab = 0;
  bool reused = false;  // read from the folder, not made now

  // The teacher's shards of each split (the val one only when there is a validation split).
  std::vector<std::filesystem::path> teacher_train_shards() const { return {train.teacher_shard}; }
  std::vector<std::filesystem::path> teacher_val_shards() const;
};

inline constexpr const char* kPairedStreamManifest = "paired.json";

// Reads the folder when it was made from these shards and tokenizers and is intact; otherwise makes it (atomic
// writes, paired.json last, so an interrupted build is made again). Several processes may call it at once: each
// writes the same bytes.
PairedStream load_or_build_paired_stream(const PairedStreamRequest& request);

// The names the paired stream writes in its folder (for run-folder clean-up).
std::vector<std::string> paired_stream_files();

}  // namespace retort::distill::xtoken
