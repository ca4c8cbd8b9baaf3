// align_by_offsets, shape_of and position_chunk_ids on hand-made tokenizations whose chunks are worked out by hand.
#include <gtest/gtest.h>

#include "distill/xtoken/alignment.h"
#include "distill/xtoken/alignment_stats.h"
#include "tests/distill/xtoken/alignment_test_support.h"
#include "tests/test_support.h"

namespace retort::distill::xtoken {
namespace {
using testing_support::chunk;
using testing_support::expect_tiles_both_sides;
using testing_support::tiled;
constexpr auto kBos = SpecialRole::kBos;
constexpr auto kEos = SpecialRole::kEos;

// "abcdefghij": student a|bc|d|ef|ghi|j, teacher a|b|c|def|gh|ij. Byte boundaries student {1,3,4,6,9,10}, teacher
// {1,2,3,6,8,10}; shared {1,3,6,10}: chunks a|a (1:1), bc|b c (1:N), d ef|def (N:1), ghi j|gh ij (N:M).
TEST(OffsetAlignment, EveryTwoSidedShapeFromSharedByteBoundaries) {
  const SideTokens s = tiled({{"a"}, {"bc"}, {"d"}, {"ef"}, {"ghi"}, {"j"}});
  const SideTokens t = tiled({{"a"}, {"b"}, {"c"}, {"def"}, {"gh"}, {"ij"}});
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 3, true), chunk(2, 4, 3, 4, true),
                                       chunk(4, 6, 4, 6, true)};
  EXPECT_EQ(a.chunks, expected);
  ASSERT_EQ(a.chunks.size(), 4u);
  EXPECT_EQ(shape_of(a.chunks[0]), ChunkShape::kOneToOne);
  EXPECT_EQ(shape_of(a.chunks[1]), ChunkShape::kOneToMany);
  EXPECT_EQ(shape_of(a.chunks[2]), ChunkShape::kManyToOne);
  EXPECT_EQ(shape_of(a.chunks[3]), ChunkShape::kManyToMany);
}

// Text "axyb": the student covers every byte; the teacher has no token for "x", the student none for "y" (as a
// normaliser that drops a character would leave it). Each uncovered stretch is an orphan on the side that has it.
TEST(OffsetAlignment, TextOnOneSideOnlyIsAnOrphanWithItsEmptySideAtTheNextToken) {
  SideTokens s = tiled({{"a"}, {"x"}, {"b"}});
  s.spans[2] = {3, 4};  // "b" after the missing "y"
  SideTokens t = tiled({{"a"}, {"y"}, {"b"}});
  t.spans[1] = {2, 3};
  t.spans[2] = {3, 4};
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 1, false), chunk(2, 2, 1, 2, false),
                                       chunk(2, 3, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
  EXPECT_EQ(shape_of(a.chunks[1]), ChunkShape::kStudentOnly);
  EXPECT_EQ(shape_of(a.chunks[2]), ChunkShape::kTeacherOnly);
}

// Llama prepends BOS, Qwen does not; both end with an EOS: the BOS is a student-only orphan, the EOS a correct 1:1.
TEST(OffsetAlignment, BosOnOneSideIsAnOrphanAndEosPairsByRole) {
  const SideTokens s = tiled({{"", kBos}, {"ab"}, {"c"}, {"", kEos}});
  const SideTokens t = tiled({{"a"}, {"bc"}, {"", kEos}});
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 0, false), chunk(1, 3, 0, 2, true), chunk(3, 4, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
  // The teacher's BOS instead: the orphan is the teacher's, and specials of different roles never pair.
  const SideTokens t_bos = tiled({{"", kBos}, {"abc"}, {"", SpecialRole::kPad}});
  const Alignment b = align_by_offsets(tiled({{"abc"}, {"", kEos}}), t_bos);
  const std::vector<Chunk> expected_b = {chunk(0, 0, 0, 1, false), chunk(0, 1, 1, 2, true), chunk(1, 2, 2, 2, false),
                                         chunk(2, 2, 2, 3, false)};
  EXPECT_EQ(b.chunks, expected_b);
}

// "a€b" (€ is E2 82 AC): SentencePiece's byte fallback writes € as three byte pieces, each reporting the character's
// span [1, 4); they stay one cluster, a 3:1 chunk against the teacher's single €.
TEST(OffsetAlignment, ByteFallbackPiecesOfOneCharacterStayInOneChunk) {
  SideTokens s;
  s.ids = {10, 0xE2, 0x82, 0xAC, 11};
  s.spans = {{0, 1}, {1, 4}, {1, 4}, {1, 4}, {4, 5}};
  s.roles.assign(5, SpecialRole::kNone);
  const SideTokens t = tiled({{"a"}, {"\xE2\x82\xAC"}, {"b"}});
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 4, 1, 2, true), chunk(4, 5, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
  EXPECT_EQ(shape_of(a.chunks[1]), ChunkShape::kManyToOne);
}

// SentencePiece's own convention for the same three pieces: the last carries the character's span, the first two an
// empty span at its start. Same cluster, same chunk.
TEST(OffsetAlignment, SentencePieceBytePiecesWithEmptySpansStayWithTheirCharacter) {
  SideTokens s;
  s.ids = {10, 0xE2, 0x82, 0xAC, 11};
  s.spans = {{0, 1}, {1, 1}, {1, 1}, {1, 4}, {4, 5}};
  s.roles.assign(5, SpecialRole::kNone);
  const Alignment a = align_by_offsets(s, tiled({{"a"}, {"\xE2\x82\xAC"}, {"b"}}));
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 4, 1, 2, true), chunk(4, 5, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
}

// A token a normaliser changed (NFC's é whose offsets cover only the source's e) reads other bytes than its span:
// the chunk that holds it is not correct, the others are.
TEST(OffsetAlignment, AlteredTokensMakeTheirChunkNotCorrect) {
  SideTokens t = tiled({{"a"}, {"e"}, {"b"}});
  t.altered = {0, 1, 0};
  const Alignment a = align_by_offsets(tiled({{"a"}, {"e"}, {"b"}}), t);
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 2, false), chunk(2, 3, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
  t.altered = {1};
  EXPECT_CONTAINS(::retort::testing::message_of([&] { align_by_offsets(t, t); }), "one flag per id, or none");
}

// Byte-level BPE reports character offsets, so a token holding "x" and the first bytes of an emoji spans [0, 2)
// characters and the token with the emoji's last bytes [1, 2): in bytes [0, 5) and [1, 5), overlapping. They form
// one cluster, which meets the teacher's x|😀 only at byte 5: one correct 2:2 chunk.
TEST(OffsetAlignment, OverlappingSpansOfSplitCharactersFormOneCluster) {
  SideTokens s;
  s.ids = {1, 2, 3};
  s.spans = {{0, 5}, {1, 5}, {5, 6}};
  s.roles.assign(3, SpecialRole::kNone);
  const SideTokens t = tiled({{"x"}, {"\xF0\x9F\x98\x80"}, {"!"}});
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 2, 0, 2, true), chunk(2, 3, 2, 3, true)};
  EXPECT_EQ(a.chunks, expected);
}

// A side with a hole inside a chunk ("ab" + "de" against "abcde") covers different bytes: the chunk is not correct.
TEST(OffsetAlignment, AChunkWithAHoleOnOneSideIsNotCorrect) {
  SideTokens s = tiled({{"ab"}, {"de"}, {"f"}});
  s.spans[1] = {3, 5};
  s.spans[2] = {5, 6};
  const SideTokens t = tiled({{"abcde"}, {"f"}});
  const Alignment a = align_by_offsets(s, t);
  const std::vector<Chunk> expected = {chunk(0, 2, 0, 1, false), chunk(2, 3, 1, 2, true)};
  EXPECT_EQ(a.chunks, expected);
}

TEST(OffsetAlignment, EmptySidesAndOneEmptySide) {
  EXPECT_TRUE(align_by_offsets(SideTokens{}, SideTokens{}).chunks.empty());
  const Alignment a = align_by_offsets(tiled({{"ab"}, {"c"}}), SideTokens{});
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 0, false), chunk(1, 2, 0, 0, false)};
  EXPECT_EQ(a.chunks, expected);
}

TEST(OffsetAlignment, MalformedSidesAreInputErrorsThatSayWhatToGive) {
  SideTokens s = tiled({{"a"}});
  s.roles.clear();
  EXPECT_CONTAINS(::retort::testing::message_of([&] { align_by_offsets(s, tiled({{"a"}})); }),
                  "one span and one role per id");
  SideTokens backwards = tiled({{"ab"}});
  backwards.spans[0] = {2, 1};
  EXPECT_CONTAINS(::retort::testing::message_of([&] { align_by_offsets(tiled({{"a"}}), backwards); }),
                  "teacher side's token 0 has the byte span [2, 1)");
}

// Student BOS a bc d ef ghi j, teacher a b c def gh ij (the first test's text). Position p predicts token p + 1.
// The chunk a|a holds the teacher's token 0, which no position predicts: it gets no id, and ids count from bc|b c.
TEST(PositionChunkIds, ShiftedByOneAndNumberedOverChunksPredictedOnBothSides) {
  const SideTokens s = tiled({{"", kBos}, {"a"}, {"bc"}, {"d"}, {"ef"}, {"ghi"}, {"j"}});
  const SideTokens t = tiled({{"a"}, {"b"}, {"c"}, {"def"}, {"gh"}, {"ij"}});
  const Alignment a = align_by_offsets(s, t);
  const PositionChunks p = position_chunk_ids(a, 7, 6);
  EXPECT_EQ(p.chunk_count, 3);
  EXPECT_EQ(p.student, (std::vector<int32_t>{-1, 0, 1, 1, 2, 2}));
  EXPECT_EQ(p.teacher, (std::vector<int32_t>{0, 0, 1, 2, 2}));
}

TEST(PositionChunkIds, IncorrectChunksGetNoIdAndCountsMustCoverTheChunks) {
  SideTokens s = tiled({{"x"}, {"ab"}, {"de"}, {"f"}});
  s.spans[2] = {4, 6};
  s.spans[3] = {6, 7};
  const SideTokens t = tiled({{"x"}, {"abcde"}, {"f"}});
  const Alignment a = align_by_offsets(s, t);  // x|x, ab de|abcde (hole: not correct), f|f
  const PositionChunks p = position_chunk_ids(a, 4, 3);
  EXPECT_EQ(p.chunk_count, 1);
  EXPECT_EQ(p.student, (std::vector<int32_t>{-1, -1, 0}));
  EXPECT_EQ(p.teacher, (std::vector<int32_t>{-1, 0}));
  EXPECT_CONTAINS(::retort::testing::message_of([&] { position_chunk_ids(a, 3, 3); }), "past the 3 and 3");
  const PositionChunks none = position_chunk_ids(Alignment{}, 0, 0);
  EXPECT_TRUE(none.student.empty());
  EXPECT_EQ(none.chunk_count, 0);
}

TEST(AlignmentStats, CountsShapesAndSharesAndWarnsWithTheNumbers) {
  const SideTokens s = tiled({{"", kBos}, {"a"}, {"bc"}, {"d"}, {"ef"}, {"ghi"}, {"j"}});
  const SideTokens t = tiled({{"a"}, {"b"}, {"c"}, {"def"}, {"gh"}, {"ij"}});
  const AlignmentStats stats = alignment_stats(align_by_offsets(s, t));
  EXPECT_EQ(stats.chunks, 5);
  EXPECT_EQ(stats.correct_chunks, 4);
  EXPECT_EQ(stats.chunks_by_shape[size_t(ChunkShape::kStudentOnly)], 1);
  for (const ChunkShape shape :
       {ChunkShape::kOneToOne, ChunkShape::kOneToMany, ChunkShape::kManyToOne, ChunkShape::kManyToMany}) {
    EXPECT_EQ(stats.correct_chunks_by_shape[size_t(shape)], 1) << shape_name(shape);
  }
  EXPECT_EQ(stats.student_tokens, 7);
  EXPECT_EQ(stats.student_tokens_in_correct, 6);
  EXPECT_DOUBLE_EQ(stats.student_share(), 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(stats.teacher_share(), 1.0);
  EXPECT_FALSE(low_alignment_warning(stats).has_value());
  // Nothing shared: "abc" against "xyz" at other bytes.
  SideTokens other = tiled({{"xyz"}});
  other.spans[0] = {3, 6};
  const auto warning = low_alignment_warning(alignment_stats(align_by_offsets(tiled({{"abc"}}), other)));
  ASSERT_TRUE(warning.has_value());
  EXPECT_CONTAINS(*warning, "0.0% of the student's 1 tokens");
  EXPECT_CONTAINS(*warning, "0 of 2 chunks");
}

}  // namespace
}  // namespace retort::distill::xtoken
