// Offset alignment: the two-pointer walk over byte spans, the chunk shapes and the per-position chunk ids.
#include "distill/xtoken/alignment.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/util/error.h"
#include "distill/xtoken/token_clusters.h"

namespace retort::distill::xtoken {
namespace {

// What the walk steps over on one side: a single special token, or a cluster of text tokens whose spans overlap
// (byte-fallback or byte-level pieces of one character report the character's span, so they overlap or coincide).
// A chunk boundary can only fall between clusters.
struct Unit {
  int32_t first = 0, last = 0;  // tokens [first, last)
  bool special = false;
  SpecialRole role = SpecialRole::kNone;
  int64_t begin = 0, end = 0;  // the union of the cluster's spans
  bool altered = false;        // a token of the cluster does not read the text's bytes
};

void check_side(const SideTokens& side, const char* name) {
  if (side.spans.size() != side.ids.size() || side.roles.size() != side.ids.size()) {
    throw InputError(fmt::format("the {} side has {} ids, {} spans and {} roles: give one span and one role per id",
                                 name, side.ids.size(), side.spans.size(), side.roles.size()));
  }
  if (!side.altered.empty() && side.altered.size() != side.ids.size()) {
    throw InputError(fmt::format("the {} side has {} ids and {} altered flags: give one flag per id, or none", name,
                                 side.ids.size(), side.altered.size()));
  }
  for (size_t k = 0; k < side.spans.size(); ++k) {
    const ByteSpan& s = side.spans[k];
    if (s.begin < 0 || s.end < s.begin) {
      throw InputError(
          fmt::format("the {} side's token {} has the byte span [{}, {}): a span must be [begin, end) "
                      "with 0 <= begin <= end",
                      name, k, s.begin, s.end));
    }
  }
}

std::vector<Unit> units_of(const SideTokens& side) {
  std::vector<Unit> units;
  units.reserve(side.ids.size());
  for (size_t k = 0; k < side.ids.size(); ++k) {
    const auto token = static_cast<int32_t>(k);
    const ByteSpan& span = side.spans[k];
    const bool altered = !side.altered.empty() && side.altered[k] != 0;
    if (side.roles[k] != SpecialRole::kNone) {
      units.push_back({token, token + 1, true, side.roles[k], span.begin, span.end});
      continue;
    }
    if (!units.empty() && !units.back().special && joins_cluster(units.back().begin, units.back().end, span)) {
      Unit& u = units.back();
      u.last = token + 1;
      u.begin = std::min(u.begin, span.begin);
      u.end = std::max(u.end, span.end);
      u.altered = u.altered || altered;
      continue;
    }
    units.push_back({token, token + 1, false, SpecialRole::kNone, span.begin, span.end, altered});
  }
  return units;
}

// Pairs two runs of specials by role, in order (the longest common subsequence of roles: runs are a few tokens),
// and emits every pair as a correct 1:1 chunk and every other special as an orphan, in sequence order. s_after and
// t_after: the token that follows each run, where an orphan's empty side sits once that run is used up.
void pair_specials(std::span<const Unit> s, std::span<const Unit> t, int32_t s_after, int32_t t_after,
                   std::vector<Chunk>& out) {
  const size_t n = s.size(), m = t.size();
  std::vector<int32_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> int32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      at(i, j) = s[i].role == t[j].role ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    }
  }
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    const int32_t s_here = i < n ? s[i].first : s_after, t_here = j < m ? t[j].first : t_after;
    if (i < n && j < m && s[i].role == t[j].role && at(i, j) == at(i + 1, j + 1) + 1) {
      out.push_back({s[i].first, s[i].last, t[j].first, t[j].last, true});
      ++i, ++j;
    } else if (i < n && (j == m || at(i + 1, j) >= at(i, j + 1))) {
      out.push_back({s[i].first, s[i].last, t_here, t_here, false});
      ++i;
    } else {
      out.push_back({s_here, s_here, t[j].first, t[j].last, false});
      ++j;
    }
  }
}

}  // namespace

ChunkShape shape_of(const Chunk& chunk) {
  const int32_t s = chunk.student_end - chunk.student_begin, t = chunk.teacher_end - chunk.teacher_begin;
  if (s == 0) return ChunkShape::kTeacherOnly;
  if (t == 0) return ChunkShape::kStudentOnly;
  if (s == 1) return t == 1 ? ChunkShape::kOneToOne : ChunkShape::kOneToMany;
  return t == 1 ? ChunkShape::kManyToOne : ChunkShape::kManyToMany;
}

Alignment align_by_offsets(const SideTokens& student, const SideTokens& teacher) {
  check_side(student, "student");
  check_side(teacher, "teacher");
  const std::vector<Unit> s = units_of(student), t = units_of(teacher);
  Alignment alignment;
  std::vector<Chunk>& out = alignment.chunks;
  out.reserve(std::max(s.size(), t.size()));
  // Where the next token of each side is: an orphan's empty side sits there.
  auto s_at = [&](size_t i) { return i < s.size() ? s[i].first : static_cast<int32_t>(student.ids.size()); };
  auto t_at = [&](size_t j) { return j < t.size() ? t[j].first : static_cast<int32_t>(teacher.ids.size()); };
  size_t i = 0, j = 0;
  while (i < s.size() || j < t.size()) {
    const bool s_special = i < s.size() && s[i].special, t_special = j < t.size() && t[j].special;
    if (s_special || t_special) {
      size_t i2 = i, j2 = j;
      while (i2 < s.size() && s[i2].special) ++i2;
      while (j2 < t.size() && t[j2].special) ++j2;
      pair_specials(std::span(s).subspan(i, i2 - i), std::span(t).subspan(j, j2 - j), s_at(i2), t_at(j2), out);
      i = i2, j = j2;
      continue;
    }
    if (i == s.size()) {
      out.push_back({s_at(i), s_at(i), t[j].first, t[j].last, false});
      ++j;
      continue;
    }
    if (j == t.size()) {
      out.push_back({s[i].first, s[i].last, t_at(j), t_at(j), false});
      ++i;
      continue;
    }
    const Unit &a = s[i], &b = t[j];
    if (a.begin < b.begin && a.end <= b.begin) {  // the student's cluster lies wholly before the teacher's
      out.push_back({a.first, a.last, b.first, b.first, false});
      ++i;
      continue;
    }
    if (b.begin < a.begin && b.end <= a.begin) {
      out.push_back({a.first, a.first, b.first, b.last, false});
      ++j;
      continue;
    }
    // The clusters overlap: take whole clusters from the side that ends first until both end at one byte. A side
    // whose next cluster leaves a hole in the text, or that has none left before the other side's end, closes the
    // chunk as not correct.
    bool correct = a.begin == b.begin && !a.altered && !b.altered;
    int64_t s_end = a.end, t_end = b.end;
    size_t i2 = i + 1, j2 = j + 1;
    while (s_end != t_end) {
      if (s_end < t_end) {
        if (i2 == s.size() || s[i2].special || s[i2].begin >= t_end) {
          correct = false;
          break;
        }
        if (s[i2].begin != s_end || s[i2].altered) correct = false;
        s_end = std::max(s_end, s[i2].end);
        ++i2;
      } else {
        if (j2 == t.size() || t[j2].special || t[j2].begin >= s_end) {
          correct = false;
          break;
        }
        if (t[j2].begin != t_end || t[j2].altered) correct = false;
        t_end = std::max(t_end, t[j2].end);
        ++j2;
      }
    }
    out.push_back({a.first, s[i2 - 1].last, b.first, t[j2 - 1].last, correct});
    i = i2, j = j2;
  }
  return alignment;
}

PositionChunks position_chunk_ids(const Alignment& alignment, int64_t student_tokens, int64_t teacher_tokens) {
  if (student_tokens < 0 || teacher_tokens < 0) {
    throw InputError(
        fmt::format("position_chunk_ids: token counts must be >= 0, got {} and {}", student_tokens, teacher_tokens));
  }
  PositionChunks out;
  out.student.assign(static_cast<size_t>(std::max<int64_t>(student_tokens - 1, 0)), -1);
  out.teacher.assign(static_cast<size_t>(std::max<int64_t>(teacher_tokens - 1, 0)), -1);
  for (const Chunk& chunk : alignment.chunks) {
    if (chunk.student_end > student_tokens || chunk.teacher_end > teacher_tokens) {
      throw InputError(
          fmt::format("position_chunk_ids: a chunk ends at student token {} and teacher token {}, past "
                      "the {} and {} tokens given: pass the token counts of the aligned texts",
                      chunk.student_end, chunk.teacher_end, student_tokens, teacher_tokens));
    }
    // Token k is predicted at position k - 1: token 0 (predicted by nothing) gives no position.
    const int32_t s0 = std::max(chunk.student_begin, 1), t0 = std::max(chunk.teacher_begin, 1);
    if (!chunk.correct || s0 >= chunk.student_end || t0 >= chunk.teacher_end) continue;
    const int32_t id = out.chunk_count++;
    for (int32_t k = s0; k < chunk.student_end; ++k) out.student[static_cast<size_t>(k - 1)] = id;
    for (int32_t k = t0; k < chunk.teacher_end; ++k) out.teacher[static_cast<size_t>(k - 1)] = id;
  }
  return out;
}

}  // namespace retort::distill::xtoken
