#include "distill/xtoken/xtoken_batch.h"

#include <algorithm>

#include "core/util/error.h"

namespace retort::distill::xtoken {

namespace {

// The document holding stream token `token`.
size_t document_of(const std::vector<int64_t>& documents, int64_t token) {
  return static_cast<size_t>(std::upper_bound(documents.begin(), documents.end(), token) - documents.begin()) - 1;
}

// The teacher tokens [first, last) of the student tokens [s, e] (inclusive), whose bytes are [b0, b1).
std::pair<int64_t, int64_t> teacher_range(const PairedSplit& split, int64_t s, int64_t e, int32_t student_eos,
                                          int32_t teacher_eos) {
  const std::vector<int64_t>& off = split.teacher_offsets;
  const int64_t b0 = split.student_offsets[static_cast<size_t>(s)];
  const int64_t b1 = split.student_offsets[static_cast<size_t>(e + 1)];
  const size_t d0 = document_of(split.student_documents, s), d1 = document_of(split.student_documents, e);
  // First: the first teacher token of the first document that starts at b0 or later (a token covering b0 from
  // before is left out; the document's end-of-document id starts at its end, so it is in when the window is).
  const int64_t doc0_begin = split.teacher_documents[d0], doc0_end = split.teacher_documents[d0 + 1];
  const int64_t first = std::lower_bound(off.begin() + doc0_begin, off.begin() + doc0_end, b0) - off.begin();
  // Last: the last document's text tokens that end by b1, and its end-of-document id when the student's is in.
  const int64_t doc1_begin = split.teacher_documents[d1], doc1_end = split.teacher_documents[d1 + 1];
  if (split.student_tokens[static_cast<size_t>(e)] == student_eos) return {first, std::max(first, doc1_end)};
  const bool doc1_has_eos =
      doc1_end > doc1_begin && split.teacher_tokens[static_cast<size_t>(doc1_end - 1)] == teacher_eos;
  const int64_t text_end = doc1_end - (doc1_has_eos ? 1 : 0);
  // Token j ends at off[j + 1]: the tokens that end by b1 are those before the first offset past b1, less one.
  const int64_t past = std::upper_bound(off.begin() + doc1_begin + 1, off.begin() + text_end + 1, b1) - off.begin();
  return {first, std::max(first, past - 1)};
}

SideTokens side_tokens(std::span<const int32_t> ids, std::span<const int64_t> offsets, int64_t base,
                       const TokenTexts& texts) {
  SideTokens side;
  side.ids.assign(ids.begin(), ids.end());
  side.spans.resize(ids.size());
  side.roles.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    side.spans[i] = {offsets[i] - base, offsets[i + 1] - base};
    side.roles[i] = texts.roles[static_cast<size_t>(ids[i])];
  }
  return side;
}

}  // namespace

XtokenBatch build_xtoken_batch(const data::TokenBatch& student, const PairedSplit& split,
                               const TokenTexts& student_texts, const TokenTexts& teacher_texts,
                               int64_t teacher_context) {
  const int64_t B = student.batch, T = student.seq;
  RETORT_CHECK(static_cast<int64_t>(student.window_starts.size()) == B,
               "xtoken batch: {} window positions for {} rows: the batch must come from a TokenLoader",
               student.window_starts.size(), B);
  RETORT_CHECK(teacher_context >= 1, "xtoken batch: the teacher's context must be positive, got {}", teacher_context);
  const auto stream_size = static_cast<int64_t>(split.student_tokens.size());
  XtokenBatch out;
  out.batch = B;
  out.student_seq = T;
  out.student_chunk.assign(static_cast<size_t>(B * T), -1);
  out.teacher_starts.resize(static_cast<size_t>(B));
  out.teacher_positions.resize(static_cast<size_t>(B));

  std::vector<PositionChunks> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = student.window_starts[static_cast<size_t>(b)];
    RETORT_CHECK(s >= 0 && s + T < stream_size,
                 "xtoken batch: row {} starts at stream position {} but the paired stream holds {} student tokens: "
                 "the batch and the paired stream come from different data",
                 b, s, stream_size);
    RETORT_CHECK(split.student_tokens[static_cast<size_t>(s)] == student.inputs[static_cast<size_t>(b * T)],
                 "xtoken batch: row {} (stream position {}) reads token {}, the paired stream {}: the batch and the "
                 "paired stream come from different data",
                 b, s, student.inputs[static_cast<size_t>(b * T)], split.student_tokens[static_cast<size_t>(s)]);
    auto [first, last] = teacher_range(split, s, s + T, student_texts.eos_id, teacher_texts.eos_id);
    // Prediction positions = tokens - 1, at most the teacher's context: a longer row loses its tail tokens.
    last = std::min(last, first + teacher_context + 1);
    out.teacher_starts[static_cast<size_t>(b)] = first;
    out.teacher_positions[static_cast<size_t>(b)] = std::max<int64_t>(0, last - first - 1);
    if (last - first < 2) continue;  // no teacher prediction: the row has no chunk
    const int64_t base = split.student_offsets[static_cast<size_t>(s)];
    const SideTokens student_side = side_tokens(
        std::span<const int32_t>(split.student_tokens).subspan(static_cast<size_t>(s), T + 1),
        std::span<const int64_t>(split.student_offsets).subspan(static_cast<size_t>(s), T + 2), base, student_texts);
    const SideTokens teacher_side = side_tokens(
        std::span<const int32_t>(split.teacher_tokens).subspan(static_cast<size_t>(first), last - first),
        std::span<const int64_t>(split.teacher_offsets).subspan(static_cast<size_t>(first), last - first + 1), base,
        teacher_texts);
    rows[static_cast<size_t>(b)] =
        position_chunk_ids(align_by_offsets(student_side, teacher_side), T + 1, last - first);
  }

  int64_t L = 1;
  for (int64_t p : out.teacher_positions) L = std::max(L, p);
  out.teacher_seq = L;
  out.teacher_inputs.assign(static_cast<size_t>(B * L), teacher_texts.eos_id);
  out.teacher_chunk.assign(static_cast<size_t>(B * L), -1);
  int64_t offset = 0;
  for (int64_t b = 0; b < B; ++b) {
    const PositionChunks& row = rows[static_cast<size_t>(b)];
    const int64_t first = out.teacher_starts[static_cast<size_t>(b)];
    const int64_t positions = out.teacher_positions[static_cast<size_t>(b)];
    for (int64_t p = 0; p < positions; ++p)
      out.teacher_inputs[static_cast<size_t>(b * L + p)] = split.teacher_tokens[static_cast<size_t>(first + p)];
    for (int64_t t = 0; t < T && t < static_cast<int64_t>(row.student.size()); ++t) {
      const int32_t c = row.student[static_cast<size_t>(t)];
      if (c < 0) continue;
      out.student_chunk[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(c + offset);
      ++out.student_positions_in_chunks;
    }
    for (int64_t p = 0; p < positions && p < static_cast<int64_t>(row.teacher.size()); ++p) {
      const int32_t c = row.teacher[static_cast<size_t>(p)];
      if (c < 0) continue;
      out.teacher_chunk[static_cast<size_t>(b * L + p)] = static_cast<int32_t>(c + offset);
      ++out.teacher_positions_in_chunks;
    }
    offset += row.chunk_count;
  }
  out.chunk_count = offset;
  return out;
}

void drop_teacher_positions(XtokenBatch& batch, const std::vector<int64_t>& covered) {
  RETORT_CHECK(static_cast<int64_t>(covered.size()) == batch.batch, "drop_teacher_positions: {} rows, {} counts",
               batch.batch, covered.size());
  bool dropped = false;
  for (int64_t b = 0; b < batch.batch; ++b)
    for (int64_t p = std::max<int64_t>(0, covered[static_cast<size_t>(b)]); p < batch.teacher_seq; ++p) {
      int32_t& c = batch.teacher_chunk[static_cast<size_t>(b * batch.teacher_seq + p)];
      dropped |= c >= 0;
      c = -1;
    }
  if (!dropped) return;
  std::vector<int32_t> renumbered(static_cast<size_t>(batch.chunk_count), -1);
  for (int32_t c : batch.teacher_chunk)
    if (c >= 0) renumbered[static_cast<size_t>(c)] = 0;
  int32_t next = 0;
  for (int32_t& id : renumbered)
    if (id == 0) id = next++;
  batch.student_positions_in_chunks = batch.teacher_positions_in_chunks = 0;
  for (int32_t& c : batch.student_chunk)
    if (c >= 0 && (c = renumbered[static_cast<size_t>(c)]) >= 0) ++batch.student_positions_in_chunks;
  for (int32_t& c : batch.teacher_chunk)
    if (c >= 0 && (c = renumbered[static_cast<size_t>(c)]) >= 0) ++batch.teacher_positions_in_chunks;
  batch.chunk_count = next;
}

}  // namespace retort::distill::xtoken
