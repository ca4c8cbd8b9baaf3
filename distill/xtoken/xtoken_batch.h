#pragma once
// From a student micro-batch to its teacher rows and chunk ids. Row b of a student TokenBatch reads the student
// stream's tokens [s, s + T] (its T inputs and its last target; s = window_starts[b]), which stand for the bytes
// [b0, b1) of the split's text (paired_stream.h). The teacher row is the teacher tokens whose byte spans lie in
// [b0, b1): a teacher token that starts before b0 or ends after b1 is left out, so the text at the window's edges may
// be on the student side alone (an unaligned chunk, which the loss skips). End-of-document ids belong to the row when
// their document's end-of-document id is in the student window too. Both rows are aligned by their byte spans
// (alignment.h, align_by_offsets) and their prediction positions get chunk ids (position_chunk_ids: logits at p
// belong to the chunk of token p + 1).
//
// The teacher rows are laid out as one padded [B, L] batch: L = the longest row's prediction positions (its tokens
// - 1), at most the teacher's context (a longer row loses its tail tokens before the alignment). Row b's teacher
// position p reads teacher token p and predicts token p + 1; positions past the row's end have chunk -1. Chunk ids are
// made unique over the micro-batch (row b's ids are offset by the chunks of rows 0..b-1), so one loss call takes it
// whole.
#include <cstdint>
#include <vector>

#include "core/data/loader.h"
#include "distill/xtoken/paired_stream.h"

namespace retort::distill::xtoken {

struct XtokenBatch {
  int64_t batch = 0;
  int64_t student_seq = 0;  // T: student prediction positions per row
  int64_t teacher_seq = 0;  // L: teacher prediction positions per row (padded)
  // [B, L] teacher input tokens (padding: the teacher's end-of-document id), and per row the stream position of its
  // first token and its real prediction positions (at most L).
  std::vector<int32_t> teacher_inputs;
  std::vector<int64_t> teacher_starts;
  std::vector<int64_t> teacher_positions;
  std::vector<int32_t> student_chunk;  // [B, T]
  std::vector<int32_t> teacher_chunk;  // [B, L]
  int64_t chunk_count = 0;             // valid chunks of the micro-batch (ids 0..chunk_count-1)
  int64_t student_positions_in_chunks = 0;
  int64_t teacher_positions_in_chunks = 0;
};

// The teacher side of `student` over one split of the paired stream. teacher_context: the most prediction
// positions the teacher takes in one row (its block size). Windows must lie in the split's student stream.
XtokenBatch build_xtoken_batch(const data::TokenBatch& student, const PairedSplit& split,
                               const TokenTexts& student_texts, const TokenTexts& teacher_texts,
                               int64_t teacher_context);

// Positions p >= covered[b] of teacher row b lose their chunk (the teacher has no distribution there: the end of the
// top-k cache); a chunk left with no teacher position is dropped from the student side too, and the chunk ids are
// numbered again 0..chunk_count-1 in their order, so every id in the batch has positions on both sides.
void drop_teacher_positions(XtokenBatch& batch, const std::vector<int64_t>& covered);

}  // namespace retort::distill::xtoken
