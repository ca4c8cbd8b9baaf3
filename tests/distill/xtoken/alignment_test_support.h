#pragma once
// Hand-made sides of an alignment: tokens given by their text, laid end to end, and chunks written as expected.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "distill/xtoken/alignment.h"

// Expects `needle` in the string `haystack`, printing the haystack when it is not there.
#define EXPECT_CONTAINS(haystack, needle)                              \
  do {                                                                 \
    const std::string expect_contains_text = (haystack);               \
    EXPECT_NE(expect_contains_text.find(needle), std::string::npos)    \
        << "'" << (needle) << "' is not in: " << expect_contains_text; \
  } while (0)

namespace retort::distill::xtoken {

inline void PrintTo(const Chunk& c, std::ostream* os) {
  *os << "{s[" << c.student_begin << "," << c.student_end << ") t[" << c.teacher_begin << "," << c.teacher_end << ") "
      << (c.correct ? "correct" : "not correct") << "}";
}

inline bool operator==(const Chunk& a, const Chunk& b) {
  return a.student_begin == b.student_begin && a.student_end == b.student_end && a.teacher_begin == b.teacher_begin &&
         a.teacher_end == b.teacher_end && a.correct == b.correct;
}

namespace testing_support {

struct Piece {
  std::string text;  // the bytes the token stands for; empty for a special
  SpecialRole role = SpecialRole::kNone;
};

// Tokens that tile a text in order: each text token spans its own bytes, each special an empty span where it sits.
inline SideTokens tiled(const std::vector<Piece>& pieces) {
  SideTokens side;
  int64_t at = 0;
  for (const Piece& p : pieces) {
    side.ids.push_back(static_cast<int32_t>(side.ids.size()));
    side.spans.push_back({at, at + static_cast<int64_t>(p.text.size())});
    side.roles.push_back(p.role);
    at += static_cast<int64_t>(p.text.size());
  }
  return side;
}

inline Chunk chunk(int32_t s0, int32_t s1, int32_t t0, int32_t t1, bool correct) {
  return Chunk{s0, s1, t0, t1, correct};
}

// Every token of both sides in exactly one chunk, chunks in order.
inline void expect_tiles_both_sides(const Alignment& a, int64_t student_tokens, int64_t teacher_tokens) {
  int32_t s = 0, t = 0;
  for (size_t k = 0; k < a.chunks.size(); ++k) {
    const Chunk& c = a.chunks[k];
    ASSERT_EQ(c.student_begin, s) << "chunk " << k;
    ASSERT_EQ(c.teacher_begin, t) << "chunk " << k;
    ASSERT_LE(c.student_begin, c.student_end) << "chunk " << k;
    ASSERT_LE(c.teacher_begin, c.teacher_end) << "chunk " << k;
    ASSERT_TRUE(c.student_end > c.student_begin || c.teacher_end > c.teacher_begin) << "empty chunk " << k;
    s = c.student_end, t = c.teacher_end;
  }
  EXPECT_EQ(s, student_tokens);
  EXPECT_EQ(t, teacher_tokens);
}

}  // namespace testing_support
}  // namespace retort::distill::xtoken
