// align_by_strings (Needleman-Wunsch with combination moves) on hand-made token strings whose optimal alignment is
// worked out by hand, and on long sequences that the anchors cut into windows.
#include <gtest/gtest.h>

#include <random>

#include "distill/xtoken/alignment.h"
#include "tests/distill/xtoken/alignment_test_support.h"
#include "tests/test_support.h"

namespace retort::distill::xtoken {
namespace {
using testing_support::chunk;
using testing_support::expect_tiles_both_sides;
using testing_support::tiled;
using Strings = std::vector<std::string>;

Alignment align(const Strings& s, const Strings& t, const StringAlignmentOptions& options = {}) {
  return align_by_strings(std::span<const std::string>(s), std::span<const std::string>(t), options);
}

// a|a scores +3, "bc" = "b" + "c" is a 1:2 combination (+3), "def" = "d" + "ef" a 2:1 combination (+3): 9 in all,
// against 0 or less for any alignment with mismatches or gaps there.
TEST(StringAlignment, CombinationMovesInBothDirections) {
  const Alignment a = align({"a", "bc", "d", "ef", "gh"}, {"a", "b", "c", "def", "gh"});
  const std::vector<Chunk> expected = {chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 3, true), chunk(2, 4, 3, 4, true),
                                       chunk(4, 5, 4, 5, true)};
  EXPECT_EQ(a.chunks, expected);
}

// Four pieces combine, five do not: "abcde" against a|b|c|d|e has no combination move, so NW gives mismatches and
// gaps; the region still covers the same string on both sides and becomes one correct 1:5 chunk.
TEST(StringAlignment, CombinationsUpToFourAndLongerRunsThroughTheBalancedRegion) {
  EXPECT_EQ(align({"abcd", "x"}, {"a", "b", "c", "d", "x"}).chunks,
            (std::vector<Chunk>{chunk(0, 1, 0, 4, true), chunk(1, 2, 4, 5, true)}));
  EXPECT_EQ(align({"abcde", "x"}, {"a", "b", "c", "d", "e", "x"}).chunks,
            (std::vector<Chunk>{chunk(0, 1, 0, 5, true), chunk(1, 2, 5, 6, true)}));
  // With max_combination 2, "abc" is no combination but still one region.
  StringAlignmentOptions two;
  two.max_combination = 2;
  EXPECT_EQ(align({"abc"}, {"a", "b", "c"}, two).chunks, (std::vector<Chunk>{chunk(0, 1, 0, 3, true)}));
}

// x|x and z|z match; y against q scores -3 as a mismatch and -3 as two gaps: the diagonal wins the tie, and the
// mismatch stays a 1:1 chunk that is not correct.
TEST(StringAlignment, MismatchesAreChunksThatAreNotCorrect) {
  const Alignment a = align({"x", "y", "z"}, {"x", "q", "z"});
  EXPECT_EQ(a.chunks, (std::vector<Chunk>{chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 2, false), chunk(2, 3, 2, 3, true)}));
}

// A teacher token with no counterpart: one gap (-1.5) beats two mismatches; it is a teacher-only orphan.
TEST(StringAlignment, GapsAreOrphans) {
  const Alignment a = align({"a", "b", "c"}, {"a", "zz", "b", "c"});
  EXPECT_EQ(a.chunks, (std::vector<Chunk>{chunk(0, 1, 0, 1, true), chunk(1, 1, 1, 2, false), chunk(1, 2, 2, 3, true),
                                          chunk(2, 3, 3, 4, true)}));
  const Alignment b = align({"a", "zz", "b"}, {"a", "b"});
  EXPECT_EQ(b.chunks, (std::vector<Chunk>{chunk(0, 1, 0, 1, true), chunk(1, 2, 1, 1, false), chunk(2, 3, 1, 2, true)}));
}

// "ab" "c" against "a" "bc": no token equals another or a concatenation, yet both sides spell "abc": one 2:2 chunk.
// "==" "==" "==" against "=" "==" "==" "=": NW matches "==" with "==" one byte off; the region from the first gap to
// where both sides have spelled "======" is cut at the bytes they share: only 6, one 3:4 chunk.
TEST(StringAlignment, ManyToManyChunksFromRegionsThatSpellTheSameString) {
  EXPECT_EQ(align({"ab", "c", "d"}, {"a", "bc", "d"}).chunks,
            (std::vector<Chunk>{chunk(0, 2, 0, 2, true), chunk(2, 3, 2, 3, true)}));
  EXPECT_EQ(align({"==", "==", "==", "x"}, {"=", "==", "==", "=", "x"}).chunks,
            (std::vector<Chunk>{chunk(0, 3, 0, 4, true), chunk(3, 4, 4, 5, true)}));
}

// Canonical strings are bytes: "€" split into its three bytes on one side and two pieces on the other. Bytes match
// one by one, but a chunk never ends inside a character: one 3:2 chunk, as the offset alignment keeps the pieces.
TEST(StringAlignment, PiecesOfOneCharacterStayInOneChunk) {
  EXPECT_EQ(align({"a", "\xE2", "\x82", "\xAC", "b"}, {"a", "\xE2\x82", "\xAC", "b"}).chunks,
            (std::vector<Chunk>{chunk(0, 1, 0, 1, true), chunk(1, 4, 1, 3, true), chunk(4, 5, 3, 4, true)}));
}

// Specials are empty strings (role kOther in this overload) or roles given: they pair by role, a BOS on one side is
// an orphan, and a special never matches text.
TEST(StringAlignment, SpecialsPairByRole) {
  EXPECT_EQ(align({"", "ab", "c", ""}, {"ab", "c", ""}).chunks,
            (std::vector<Chunk>{chunk(0, 1, 0, 0, false), chunk(1, 2, 0, 1, true), chunk(2, 3, 1, 2, true),
                                chunk(3, 4, 2, 3, true)}));
  const Strings s = {"", "hi", ""}, t = {"hi", ""};
  const std::vector<SpecialRole> sr = {SpecialRole::kBos, SpecialRole::kNone, SpecialRole::kEos};
  const std::vector<SpecialRole> tr = {SpecialRole::kNone, SpecialRole::kEos};
  const Alignment a = align_by_strings(s, sr, t, tr);
  EXPECT_EQ(a.chunks, (std::vector<Chunk>{chunk(0, 1, 0, 0, false), chunk(1, 2, 0, 1, true), chunk(2, 3, 1, 2, true)}));
  const std::vector<SpecialRole> pad = {SpecialRole::kNone, SpecialRole::kPad};
  const Alignment b = align_by_strings(s, sr, t, pad);
  EXPECT_EQ(b.chunks,
            (std::vector<Chunk>{chunk(0, 1, 0, 0, false), chunk(1, 2, 0, 1, true), chunk(2, 3, 1, 2, false)}));
}

TEST(StringAlignment, BadArgumentsAreInputErrors) {
  const Strings s = {"a"};
  const std::vector<SpecialRole> none;
  EXPECT_CONTAINS(::retort::testing::message_of([&] { align_by_strings(s, none, s, none); }), "one role per string");
  StringAlignmentOptions zero;
  zero.max_combination = 0;
  EXPECT_CONTAINS(::retort::testing::message_of([&] { align(s, s, zero); }), "max_combination 0");
}

// Two tokenizations of one long random text, as two real tokenizers differ: most words are one token on both sides,
// one in five is split into pieces of 1 to 3 characters on one side or both. The chunks must be exactly the offset
// alignment's (spans = cumulative lengths), and 100k tokens must run through the anchored windows fast (one 100k x 100k
// DP would not even fit in memory).
TEST(StringAlignment, LongSequencesThroughAnchorsEqualTheOffsetAlignment) {
  std::mt19937 rng(7);
  Strings words;
  const Strings stems = {"cat", "sat", "mat", "went", "home", "über", "日本", "====", "1234", "then", "and", "x"};
  for (const std::string& a : stems) {
    for (const std::string& b : stems) words.push_back(" " + a + b);
  }
  words.insert(words.end(), {",", ".", "\n", "\n\n", " the", " a"});
  std::string text;
  Strings s, t;
  auto split = [&](const std::string& w, Strings& out) {
    // Pieces of 1 to 3 characters (the real-text tests split characters into byte pieces).
    size_t at = 0;
    while (at < w.size()) {
      size_t end = at;
      for (size_t chars = 1 + rng() % 3; chars > 0 && end < w.size(); --chars) {
        ++end;
        while (end < w.size() && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) ++end;
      }
      out.push_back(w.substr(at, end - at));
      at = end;
    }
  };
  while (s.size() < 100000) {
    const std::string& w = words[rng() % words.size()];
    text += w;
    if (rng() % 5 != 0) {
      s.push_back(w);
    } else {
      split(w, s);
    }
    if (rng() % 5 != 0) {
      t.push_back(w);
    } else {
      split(w, t);
    }
  }
  auto as_side = [](const Strings& strings) {
    std::vector<testing_support::Piece> pieces;
    for (const std::string& p : strings) pieces.push_back({p});
    return tiled(pieces);
  };
  const Alignment by_offsets = align_by_offsets(as_side(s), as_side(t));
  const Alignment by_strings = align(s, t);
  expect_tiles_both_sides(by_strings, int64_t(s.size()), int64_t(t.size()));
  for (size_t k = 0; k < std::min(by_offsets.chunks.size(), by_strings.chunks.size()); ++k) {
    if (!(by_strings.chunks[k] == by_offsets.chunks[k])) {
      std::string ss, ts;
      for (size_t q = k < 3 ? 0 : k - 3; q < k + 4; ++q) {
        const Chunk& c = by_strings.chunks[q];
        ss += "[";
        for (int32_t i = c.student_begin; i < c.student_end; ++i) ss += s[i] + "|";
        ss += " / ";
        for (int32_t i = c.teacher_begin; i < c.teacher_end; ++i) ss += t[i] + "|";
        ss += c.correct ? "] " : "]x ";
        const Chunk& d = by_offsets.chunks[q];
        ts += "[";
        for (int32_t i = d.student_begin; i < d.student_end; ++i) ts += s[i] + "|";
        ts += " / ";
        for (int32_t i = d.teacher_begin; i < d.teacher_end; ++i) ts += t[i] + "|";
        ts += d.correct ? "] " : "]x ";
      }
      FAIL() << "chunk " << k << "\nstrings: " << ss << "\noffsets: " << ts;
    }
  }
  ASSERT_EQ(by_strings.chunks.size(), by_offsets.chunks.size());
}

}  // namespace
}  // namespace retort::distill::xtoken

namespace retort::distill::xtoken {
namespace {

// A run with no anchor at all (every 3-gram repeats): one window of 2100 x 2100 cells, past the largest DP window
// (2^22 cells), is cut in two at the byte-proportional point; "aa" tokens against "a" pairs (1500 x 3000) still
// align as 1:2 combinations across the cut.
TEST(StringAlignment, AWindowTooLargeForOneDpIsCutInTwo) {
  const Strings s(2100, "a");
  const Strings t(2100, "a");
  const Alignment a = align(s, t);
  ASSERT_EQ(a.chunks.size(), 2100u);
  for (size_t k = 0; k < a.chunks.size(); ++k)
    ASSERT_EQ(a.chunks[k], chunk(int32_t(k), int32_t(k + 1), int32_t(k), int32_t(k + 1), true)) << k;
  const Strings pairs(1500, "aa");
  const Strings singles(3000, "a");
  const Alignment b = align(pairs, singles);
  ASSERT_EQ(b.chunks.size(), 1500u);
  for (size_t k = 0; k < b.chunks.size(); ++k) {
    ASSERT_EQ(b.chunks[k], chunk(int32_t(k), int32_t(k + 1), int32_t(2 * k), int32_t(2 * k + 2), true)) << k;
  }
}

}  // namespace
}  // namespace retort::distill::xtoken
