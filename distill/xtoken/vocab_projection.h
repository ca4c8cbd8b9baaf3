#pragma once
// The student -> teacher vocabulary projection of cross-tokenizer distillation (shared/reference xtoken.md section
// 2), built once per tokenizer pair. Row s of the sparse matrix W [V_s, V_t] says which teacher tokens student token
// s stands for, with weights summing to 1:
//  - exact: the bytes s stands for in text (Tokenizer::token_bytes) are exactly a teacher token's: weight 1 on it;
//  - otherwise the teacher tokenizer's own encoding of those bytes (no special tokens), cut at max_pieces pieces,
//    piece i weighted 0.9 * 0.1^i and the row normalised (two pieces: .909 / .091); a teacher id that comes back
//    twice has its weights added;
//  - a special token maps by role: the student's end-of-document token to the teacher's, a special whose text is a
//    teacher special's to that one; any other special, and any id that stands for no bytes, maps to nothing (an
//    empty row);
//  - ids of the student model past its tokenizer's (a model vocabulary padded beyond the tokenizer, as Qwen3's
//    151,936 rows over 151,669 ids) get empty rows, and teacher ids past the teacher tokenizer are never targets.
// Bytes that are not valid UTF-8 (a token holding part of a character) are not re-encoded as text: each such byte
// maps to the teacher token of that single byte (a byte-level token, or a <0xNN> byte piece).
//
// When several tokens of one side stand for the same bytes (SentencePiece's byte piece <0x41> and its piece "A"),
// the one that side's encoder writes for those bytes is the canonical one: exact matches go to the teacher's
// canonical token, and the common-id pairs of the gold loss (common_ids.h) prefer the student's canonical token.
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/tokenizer.h"
#include "losses/chunk_distillation.h"

namespace retort::distill::xtoken {

struct ProjectionOptions {
  // Teacher pieces kept per re-encoded student token, and the decay of their weights: piece i gets 0.9 * decay^i
  // before the row is normalised.
  int max_pieces = 4;
  double decay = 0.1;
  // The reverse pass: every teacher token whose bytes are exactly a student token's is merged into that student
  // token's row with weight 1 (so a row may list each of the teacher's tokens with its bytes), the row then keeps its
  // max_pieces largest weights and is normalised again. Off by default: the forward pass already maps every such
  // row exactly, to the teacher's canonical token.
  bool reverse_pass = false;
};

// What the projection is for: both tokenizers (by fingerprint) and both models' vocabularies. A saved projection
// (vocab_projection_file.h) is reused only for the same identity and options.
struct ProjectionIdentity {
  std::string student_fingerprint, teacher_fingerprint;
  int64_t student_tokenizer_vocab = 0, teacher_tokenizer_vocab = 0;
  int64_t student_model_vocab = 0, teacher_model_vocab = 0;
};

struct ProjectionReport {
  int64_t student_tokenizer_ids = 0;  // rows that belong to the student tokenizer (the rest are padding)
  int64_t exact_rows = 0;             // mapped exactly (same bytes, or a special by role)
  int64_t reencoded_rows = 0;         // mapped through the teacher's encoding of the bytes
  int64_t empty_rows = 0;             // mapped to nothing, padding rows included
  double exact_share = 0;             // exact_rows / student_tokenizer_ids
  double mean_pieces = 0;             // mean entries of the non-empty rows
  double build_seconds = 0;           // building (or reading) it
  bool loaded = false;                // read from a saved file rather than built
};

struct StudentTeacherProjection {
  ProjectionIdentity identity;
  ProjectionOptions options;
  losses::VocabProjection matrix;  // CSR on the CPU, student_vocab = the student model's vocabulary
  std::vector<uint8_t> exact;      // per row: 1 when mapped exactly
  std::vector<uint8_t> canonical;  // per row: 1 unless another student id with the same bytes is the canonical one
  ProjectionReport report;
};

// The identity of a tokenizer pair and its models' vocabularies (each model's vocabulary at least its tokenizer's).
ProjectionIdentity projection_identity(const data::Tokenizer& student, const data::Tokenizer& teacher,
                                       int64_t student_model_vocab, int64_t teacher_model_vocab);

StudentTeacherProjection build_vocab_projection(const data::Tokenizer& student, const data::Tokenizer& teacher,
                                                int64_t student_model_vocab, int64_t teacher_model_vocab,
                                                const ProjectionOptions& options = {});

// One line for logs: the exact share, mean pieces per row, and the build time.
std::string describe(const ProjectionReport& report);

}  // namespace retort::distill::xtoken
