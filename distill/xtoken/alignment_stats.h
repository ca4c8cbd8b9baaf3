#pragma once
// What an alignment looks like in numbers: chunks per shape, and the share of each side's tokens that sit in correct
// chunks (the tokens a chunk loss can use). A warning when almost nothing aligns: two tokenizers read from different
// texts, or offsets that do not point into the text.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {

inline constexpr int kChunkShapes = 6;
// "1:1", "1:N", "N:1", "N:M", "student-only", "teacher-only".
const char* shape_name(ChunkShape shape);

struct AlignmentStats {
  int64_t chunks = 0;
  int64_t correct_chunks = 0;
  std::array<int64_t, kChunkShapes> chunks_by_shape{};          // indexed by ChunkShape
  std::array<int64_t, kChunkShapes> correct_chunks_by_shape{};  // only correct chunks
  int64_t student_tokens = 0, teacher_tokens = 0;
  int64_t student_tokens_in_correct = 0, teacher_tokens_in_correct = 0;

  // Tokens in correct chunks / tokens, per side (1 for a side with no tokens).
  double student_share() const;
  double teacher_share() const;
  // Sums another text's counts into these.
  void add(const AlignmentStats& other);
};

AlignmentStats alignment_stats(const Alignment& alignment);

// The share of tokens on either side below which the alignment is reported as failing.
inline constexpr double kLowAlignmentShare = 0.5;
// A warning with the numbers when either side has less than min_share of its tokens in correct chunks; none
// otherwise (and none for an empty alignment).
std::optional<std::string> low_alignment_warning(const AlignmentStats& stats, double min_share = kLowAlignmentShare);

}  // namespace retort::distill::xtoken
