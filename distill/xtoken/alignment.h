#pragma once
// Cross-tokenizer alignment (shared/reference xtoken.md section 1): one text read by two tokenizers, the student's
// and the teacher's, cut into chunks that stand for the same text on both sides. A chunk is a half-open span of
// student tokens [student_begin, student_end) and of teacher tokens [teacher_begin, teacher_end); one side may be
// empty (an orphan). Shapes 1:1, 1:N, N:1, N:M and one-sided.
//
// Two ways to align:
//  - align_by_offsets: from each token's byte span in the text, O(n + m) by a two-pointer walk. Tokens that stand
//    for no text (BOS, EOS, PAD: empty spans) are paired by role; a special present on one side only is an orphan.
//    Tokens that share one span (the byte-fallback pieces of one character) stay together in one chunk.
//  - align_by_strings: when offsets are unusable, Needleman-Wunsch over canonical token strings (the bytes each
//    token stands for), with combination moves that match one token against 2..4 tokens of the other side.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace retort::distill::xtoken {

// [begin, end) in the UTF-8 bytes of the text.
struct ByteSpan {
  int64_t begin = 0;
  int64_t end = 0;
};

// What a token that stands for no text is; kNone for every token of text.
enum class SpecialRole : int8_t { kNone, kBos, kEos, kPad, kOther };

// One side's tokens of a text.
struct SideTokens {
  std::vector<int32_t> ids;
  std::vector<ByteSpan> spans;     // one per id
  std::vector<SpecialRole> roles;  // one per id
  // One per id, or empty (none): true where the token's bytes are not the text's bytes of its span, because the
  // tokenizer normalised them (NFC composes e + U+0301 into one é whose offsets point at the e alone). A chunk that
  // holds such a token is not correct: its two sides do not read the same bytes.
  std::vector<uint8_t> altered;
};

struct Chunk {
  int32_t student_begin = 0, student_end = 0;
  int32_t teacher_begin = 0, teacher_end = 0;
  // Both sides are non-empty and stand for the same bytes of the text (or, for paired specials, the same role).
  bool correct = false;
};

enum class ChunkShape { kOneToOne, kOneToMany, kManyToOne, kManyToMany, kStudentOnly, kTeacherOnly };
ChunkShape shape_of(const Chunk& chunk);

struct Alignment {
  std::vector<Chunk> chunks;  // in text order; every token of both sides in exactly one chunk
};

Alignment align_by_offsets(const SideTokens& student, const SideTokens& teacher);

struct StringAlignmentOptions {
  double match = 3.0, mismatch = -3.0, gap = -1.5;
  double combination_per_token = 1.5;  // a combination of k tokens scores combination_per_token * k
  int max_combination = 4;
};
// Canonical strings: the bytes each token stands for (a leading space marker of any tokenizer is a space byte,
// byte pieces are their byte); specials are empty strings and are paired by role as above.
Alignment align_by_strings(std::span<const std::string> student, std::span<const std::string> teacher,
                           const StringAlignmentOptions& options = {});
// The same with each token's role: specials pair only with a special of the same role (the overload above takes an
// empty string for a special of role kOther and any other string for text). Tokens whose strings are equal are
// matched; runs of unmatched tokens whose concatenations are equal (an N:M chunk such as "ab" "c" against "a" "bc")
// become chunks cut at every byte position both sides share, as align_by_offsets would cut them.
Alignment align_by_strings(std::span<const std::string> student, std::span<const SpecialRole> student_roles,
                           std::span<const std::string> teacher, std::span<const SpecialRole> teacher_roles,
                           const StringAlignmentOptions& options = {});

// The chunk of each position's PREDICTION: logits at position p predict token p + 1, so they belong to the chunk of
// token p + 1. positions = tokens - 1 on each side; -1 where that token is in no correct chunk. Chunk ids are
// numbered 0..chunk_count-1 over the correct chunks that hold at least one prediction on BOTH sides.
struct PositionChunks {
  std::vector<int32_t> student;
  std::vector<int32_t> teacher;
  int32_t chunk_count = 0;
};
PositionChunks position_chunk_ids(const Alignment& alignment, int64_t student_tokens, int64_t teacher_tokens);

}  // namespace retort::distill::xtoken
