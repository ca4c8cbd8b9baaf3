// The teacher rows and chunk ids of a student micro-batch, on a hand-made pair of tokenizations of two documents:
//   text   "abcdef" | "xyz"
//   student  ab | c | def | </s> | x | yz | </s>
//   teacher  a | bc | de | f | </s> | xyz | </s>
// Every expectation below is worked out by hand from the byte spans.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/util/error.h"
#include "distill/xtoken/xtoken_batch.h"

namespace retort::distill::xtoken {
namespace {

TokenTexts texts(std::vector<std::string> bytes) {
  TokenTexts t;
  t.eos_id = 0;
  t.roles.assign(bytes.size(), SpecialRole::kNone);
  t.roles[0] = SpecialRole::kEos;
  t.bytes = std::move(bytes);
  t.name = "hand-made";
  return t;
}

struct HandMadePair {
  TokenTexts student = texts({"", "ab", "c", "def", "x", "yz"});
  TokenTexts teacher = texts({"", "a", "bc", "de", "f", "xyz"});
  PairedSplit split;
  HandMadePair() {
    split.student_tokens = {1, 2, 3, 0, 4, 5, 0};
    split.student_offsets = {0, 2, 3, 6, 6, 7, 9, 9};
    split.teacher_tokens = {1, 2, 3, 4, 0, 5, 0};
    split.teacher_offsets = {0, 1, 3, 5, 6, 6, 9, 9};
    split.student_documents = {0, 4, 7};
    split.teacher_documents = {0, 5, 7};
  }
};

data::TokenBatch batch_of(const PairedSplit& split, std::vector<int64_t> starts, int64_t T) {
  data::TokenBatch b;
  b.batch = static_cast<int64_t>(starts.size());
  b.seq = T;
  for (int64_t s : starts)
    for (int64_t t = 0; t < T; ++t) {
      b.inputs.push_back(split.student_tokens[static_cast<size_t>(s + t)]);
      b.targets.push_back(split.student_tokens[static_cast<size_t>(s + t + 1)]);
    }
  b.window_starts = std::move(starts);
  return b;
}

// The bytes [begin, end) each chunk id stands for, read from the tokens that its positions predict (position p
// predicts token p + 1 of its row), on one side; empty spans (end-of-document ids) are kept as such.
std::map<int32_t, std::set<std::pair<int64_t, int64_t>>> predicted_spans(const std::vector<int32_t>& chunk_ids,
                                                                         int64_t positions_per_row,
                                                                         const std::vector<int64_t>& row_first_token,
                                                                         const std::vector<int64_t>& offsets) {
  std::map<int32_t, std::set<std::pair<int64_t, int64_t>>> spans;
  for (size_t i = 0; i < chunk_ids.size(); ++i) {
    if (chunk_ids[i] < 0) continue;
    const auto row = static_cast<int64_t>(i) / positions_per_row, p = static_cast<int64_t>(i) % positions_per_row;
    const auto token = static_cast<size_t>(row_first_token[static_cast<size_t>(row)] + p + 1);
    spans[chunk_ids[i]].insert({offsets[token], offsets[token + 1]});
  }
  return spans;
}

// The union of a set of spans as one range, checking that it has no hole.
std::pair<int64_t, int64_t> covered_range(const std::set<std::pair<int64_t, int64_t>>& spans) {
  const int64_t begin = spans.begin()->first;
  int64_t end = begin;
  for (const auto& [b, e] : spans) {
    EXPECT_EQ(b, end) << "a chunk's predicted tokens leave a hole in its bytes";
    end = std::max(end, e);
  }
  return {begin, end};
}

TEST(XtokenBatch, WholeDocumentsAlignWithShiftedChunkIdsAndPaddedTeacherRows) {
  const HandMadePair pair;
  const XtokenBatch xb = build_xtoken_batch(batch_of(pair.split, {0, 3}, 3), pair.split, pair.student, pair.teacher,
                                            /*teacher_context=*/64);
  // Row 0: student ab c def </s>, teacher a bc de f </s>: chunks {ab c | a bc}, {def | de f}, {</s> | </s>}. Logits
  // at p belong to token p + 1's chunk, and chunk {ab c | a bc} keeps the prediction of c and of bc.
  // Row 1: student </s> x yz </s>, teacher </s> xyz </s>: the leading pair of </s> holds no prediction; {x yz | xyz}
  // and {</s> | </s>} become ids 3 and 4 after row 0's three.
  EXPECT_EQ(xb.student_chunk, (std::vector<int32_t>{0, 1, 2, 3, 3, 4}));
  EXPECT_EQ(xb.teacher_seq, 4);  // row 0: 5 teacher tokens, 4 predictions
  EXPECT_EQ(xb.teacher_chunk, (std::vector<int32_t>{0, 1, 1, 2, 3, 4, -1, -1}));
  EXPECT_EQ(xb.teacher_inputs, (std::vector<int32_t>{1, 2, 3, 4, 0, 5, 0, 0}));  // row 1 padded with </s> (0)
  EXPECT_EQ(xb.teacher_starts, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(xb.teacher_positions, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(xb.chunk_count, 5);
  EXPECT_EQ(xb.student_positions_in_chunks, 6);
  EXPECT_EQ(xb.teacher_positions_in_chunks, 6);
}

TEST(XtokenBatch, EveryChunkStandsForTheSameBytesOnBothSides) {
  const HandMadePair pair;
  for (const std::vector<int64_t>& starts : {std::vector<int64_t>{0, 3}, {1, 2}, {3, 0}, {2, 1}}) {
    const XtokenBatch xb =
        build_xtoken_batch(batch_of(pair.split, starts, 3), pair.split, pair.student, pair.teacher, 64);
    const auto student = predicted_spans(xb.student_chunk, 3, starts, pair.split.student_offsets);
    const auto teacher =
        predicted_spans(xb.teacher_chunk, xb.teacher_seq, xb.teacher_starts, pair.split.teacher_offsets);
    ASSERT_EQ(static_cast<int64_t>(student.size()), xb.chunk_count);
    ASSERT_EQ(static_cast<int64_t>(teacher.size()), xb.chunk_count);
    for (const auto& [id, spans] : student) {
      ASSERT_TRUE(teacher.count(id)) << "chunk " << id << " has no teacher position";
      const auto [s0, s1] = covered_range(spans);
      const auto [t0, t1] = covered_range(teacher.at(id));
      EXPECT_EQ(s1, t1) << "chunk " << id << " ends at another byte on each side";
      // A row's first token is predicted by no position: a chunk that holds it shows its bytes on the other side
      // alone, so the side that starts later starts where its row's first token ends.
      if (s0 != t0) {
        const size_t row = static_cast<size_t>(std::find(xb.student_chunk.begin(), xb.student_chunk.end(), id) -
                                               xb.student_chunk.begin()) /
                           3;
        const int64_t student_first_end = pair.split.student_offsets[static_cast<size_t>(starts[row] + 1)];
        const int64_t teacher_first_end = pair.split.teacher_offsets[static_cast<size_t>(xb.teacher_starts[row] + 1)];
        EXPECT_EQ(std::max(s0, t0), s0 > t0 ? student_first_end : teacher_first_end) << "chunk " << id;
      }
    }
  }
}

TEST(XtokenBatch, ATeacherTokenCrossingTheWindowsStartOrEndIsLeftOut) {
  const HandMadePair pair;
  // Student c def </s> x = bytes [2, 7): "bc" starts at 1 and "xyz" ends at 9, so the teacher row is de f </s>;
  // c and x are on the student side alone.
  const XtokenBatch xb = build_xtoken_batch(batch_of(pair.split, {1}, 3), pair.split, pair.student, pair.teacher, 64);
  EXPECT_EQ(xb.teacher_starts, (std::vector<int64_t>{2}));
  EXPECT_EQ(xb.teacher_positions, (std::vector<int64_t>{2}));
  EXPECT_EQ(xb.teacher_inputs, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(xb.student_chunk, (std::vector<int32_t>{0, 1, -1}));  // def, </s>, x (alone)
  EXPECT_EQ(xb.teacher_chunk, (std::vector<int32_t>{0, 1}));      // f (in {def | de f}), </s>
  EXPECT_EQ(xb.chunk_count, 2);
}

TEST(XtokenBatch, TheTeachersContextCutsItsRowAndItsChunks) {
  const HandMadePair pair;
  // Two teacher predictions at most: the row is a bc de; {def | de f} loses its f and is no chunk.
  const XtokenBatch xb = build_xtoken_batch(batch_of(pair.split, {0}, 3), pair.split, pair.student, pair.teacher, 2);
  EXPECT_EQ(xb.teacher_seq, 2);
  EXPECT_EQ(xb.teacher_inputs, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(xb.student_chunk, (std::vector<int32_t>{0, -1, -1}));
  EXPECT_EQ(xb.teacher_chunk, (std::vector<int32_t>{0, -1}));
  EXPECT_EQ(xb.chunk_count, 1);
}

TEST(XtokenBatch, DroppedTeacherPositionsTakeTheirChunksOffBothSidesAndIdsStayDense) {
  const HandMadePair pair;
  XtokenBatch xb = build_xtoken_batch(batch_of(pair.split, {0, 3}, 3), pair.split, pair.student, pair.teacher, 64);
  // Row 1 keeps its first teacher position only: chunk 4 ({</s> | </s>}) loses its one teacher position.
  drop_teacher_positions(xb, {4, 1});
  EXPECT_EQ(xb.student_chunk, (std::vector<int32_t>{0, 1, 2, 3, 3, -1}));
  EXPECT_EQ(xb.teacher_chunk, (std::vector<int32_t>{0, 1, 1, 2, 3, -1, -1, -1}));
  EXPECT_EQ(xb.chunk_count, 4);
  EXPECT_EQ(xb.student_positions_in_chunks, 5);
  // Row 0 keeps its first teacher position only: chunks 1 and 2 go, and row 1's chunks 3 and 4 become 1 and 2.
  XtokenBatch cut = build_xtoken_batch(batch_of(pair.split, {0, 3}, 3), pair.split, pair.student, pair.teacher, 64);
  drop_teacher_positions(cut, {1, 2});
  EXPECT_EQ(cut.student_chunk, (std::vector<int32_t>{0, -1, -1, 1, 1, 2}));
  EXPECT_EQ(cut.teacher_chunk, (std::vector<int32_t>{0, -1, -1, -1, 1, 2, -1, -1}));
  EXPECT_EQ(cut.chunk_count, 3);
}

TEST(XtokenBatch, ABatchFromOtherDataIsAnError) {
  const HandMadePair pair;
  data::TokenBatch b = batch_of(pair.split, {0}, 3);
  b.inputs[0] = 5;
  EXPECT_THROW(build_xtoken_batch(b, pair.split, pair.student, pair.teacher, 64), Error);
  b = batch_of(pair.split, {0}, 3);
  b.window_starts = {5};
  EXPECT_THROW(build_xtoken_batch(b, pair.split, pair.student, pair.teacher, 64), Error);
}

}  // namespace
}  // namespace retort::distill::xtoken
