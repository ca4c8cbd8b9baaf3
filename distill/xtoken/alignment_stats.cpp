// Chunk statistics of an alignment and the warning when almost nothing aligns.
#include "distill/xtoken/alignment_stats.h"

#include <fmt/format.h>

namespace retort::distill::xtoken {

const char* shape_name(ChunkShape shape) {
  switch (shape) {
    case ChunkShape::kOneToOne:
      return "1:1";
    case ChunkShape::kOneToMany:
      return "1:N";
    case ChunkShape::kManyToOne:
      return "N:1";
    case ChunkShape::kManyToMany:
      return "N:M";
    case ChunkShape::kStudentOnly:
      return "student-only";
    case ChunkShape::kTeacherOnly:
      return "teacher-only";
  }
  return "?";
}

double AlignmentStats::student_share() const {
  return student_tokens == 0 ? 1.0 : double(student_tokens_in_correct) / double(student_tokens);
}

double AlignmentStats::teacher_share() const {
  return teacher_tokens == 0 ? 1.0 : double(teacher_tokens_in_correct) / double(teacher_tokens);
}

void AlignmentStats::add(const AlignmentStats& other) {
  chunks += other.chunks;
  correct_chunks += other.correct_chunks;
  for (int k = 0; k < kChunkShapes; ++k) {
    chunks_by_shape[k] += other.chunks_by_shape[k];
    correct_chunks_by_shape[k] += other.correct_chunks_by_shape[k];
  }
  student_tokens += other.student_tokens;
  teacher_tokens += other.teacher_tokens;
  student_tokens_in_correct += other.student_tokens_in_correct;
  teacher_tokens_in_correct += other.teacher_tokens_in_correct;
}

AlignmentStats alignment_stats(const Alignment& alignment) {
  AlignmentStats stats;
  for (const Chunk& chunk : alignment.chunks) {
    const auto shape = static_cast<size_t>(shape_of(chunk));
    const int64_t s = chunk.student_end - chunk.student_begin, t = chunk.teacher_end - chunk.teacher_begin;
    ++stats.chunks;
    ++stats.chunks_by_shape[shape];
    stats.student_tokens += s;
    stats.teacher_tokens += t;
    if (chunk.correct) {
      ++stats.correct_chunks;
      ++stats.correct_chunks_by_shape[shape];
      stats.student_tokens_in_correct += s;
      stats.teacher_tokens_in_correct += t;
    }
  }
  return stats;
}

std::optional<std::string> low_alignment_warning(const AlignmentStats& stats, double min_share) {
  if (stats.chunks == 0) return std::nullopt;
  const double s = stats.student_share(), t = stats.teacher_share();
  if (s >= min_share && t >= min_share) return std::nullopt;
  return fmt::format(
      "almost nothing aligns: {:.1f}% of the student's {} tokens and {:.1f}% of the teacher's {} tokens are in "
      "correct chunks ({} of {} chunks; below {:.0f}% the chunk loss sees too little). Check that both tokenizers "
      "read the same text and that their offsets point into it (a normalising tokenizer needs the string "
      "alignment)",
      100.0 * s, stats.student_tokens, 100.0 * t, stats.teacher_tokens, stats.correct_chunks, stats.chunks,
      100.0 * min_share);
}

}  // namespace retort::distill::xtoken
