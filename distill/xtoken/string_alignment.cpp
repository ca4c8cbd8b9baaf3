// String alignment: Needleman-Wunsch over canonical token strings with combination moves, for texts whose offsets
// cannot be used. Anchors (3-grams of tokens unique in both sequences) cut long inputs into independent windows, so
// time and memory grow with the sum of the windows' areas, near linear on two tokenizations of one text.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "core/util/error.h"
#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {
namespace {

// One side as the DP reads it: strings, roles, and prefix sums of the strings' lengths.
struct Side {
  std::span<const std::string> strings;
  std::span<const SpecialRole> roles;
  std::vector<int64_t> prefix_bytes;     // bytes of strings [0, k)
  std::vector<int32_t> prefix_specials;  // specials among [0, k)

  Side(std::span<const std::string> s, std::span<const SpecialRole> r) : strings(s), roles(r) {
    prefix_bytes.assign(s.size() + 1, 0);
    prefix_specials.assign(s.size() + 1, 0);
    for (size_t k = 0; k < s.size(); ++k) {
      prefix_bytes[k + 1] = prefix_bytes[k] + static_cast<int64_t>(s[k].size());
      prefix_specials[k + 1] = prefix_specials[k] + (r[k] != SpecialRole::kNone ? 1 : 0);
    }
  }
  size_t size() const { return strings.size(); }
  bool special(size_t k) const { return roles[k] != SpecialRole::kNone; }
  int64_t bytes(size_t begin, size_t end) const { return prefix_bytes[end] - prefix_bytes[begin]; }
  bool all_text(size_t begin, size_t end) const { return prefix_specials[end] == prefix_specials[begin]; }
};

bool tokens_equal(const Side& s, size_t i, const Side& t, size_t j) {
  if (s.special(i) || t.special(j)) return s.roles[i] == t.roles[j];
  return s.strings[i] == t.strings[j];
}

// Is one token of `one` the concatenation of the k tokens [j, j + k) of `many`? Specials never combine.
bool combines(const Side& one, size_t i, const Side& many, size_t j, size_t k) {
  if (one.special(i) || !many.all_text(j, j + k)) return false;
  const std::string& whole = one.strings[i];
  if (static_cast<int64_t>(whole.size()) != many.bytes(j, j + k) || whole.empty()) return false;
  size_t at = 0;
  for (size_t q = j; q < j + k; ++q) {
    const std::string& part = many.strings[q];
    if (part.empty() || std::memcmp(whole.data() + at, part.data(), part.size()) != 0) return false;
    at += part.size();
  }
  return true;
}

// One step of the traceback: [s0, s1) of the student against [t0, t1) of the teacher.
struct Move {
  int32_t s0, s1, t0, t1;
  bool equal;  // the two sides stand for the same string (or are specials of one role)
};

// Traceback codes.
enum : uint8_t { kDiag, kStudentGap, kTeacherGap, kOneToMany = 8, kManyToOne = 16 };  // + k for the combinations

// Largest DP window (cells); a larger window is cut in two at a byte-proportional point (rare: two tokenizations
// of one text have an anchor every few tokens).
constexpr int64_t kMaxWindowCells = int64_t{1} << 22;

void needleman_wunsch(const Side& s, size_t s0, size_t s1, const Side& t, size_t t0, size_t t1,
                      const StringAlignmentOptions& options, std::vector<Move>& out) {
  const size_t n = s1 - s0, m = t1 - t0;
  if (n == 0 || m == 0) {
    for (size_t i = s0; i < s1; ++i) out.push_back({int32_t(i), int32_t(i + 1), int32_t(t0), int32_t(t0), false});
    for (size_t j = t0; j < t1; ++j) out.push_back({int32_t(s1), int32_t(s1), int32_t(j), int32_t(j + 1), false});
    return;
  }
  if (static_cast<int64_t>(n + 1) * static_cast<int64_t>(m + 1) > kMaxWindowCells) {
    // Cut at the student's middle token and the teacher token where as many bytes have gone by.
    const size_t s_mid = s0 + n / 2;
    const int64_t target = t.prefix_bytes[t0] + (s.prefix_bytes[s_mid] - s.prefix_bytes[s0]);
    size_t t_mid = static_cast<size_t>(std::lower_bound(t.prefix_bytes.begin() + static_cast<ptrdiff_t>(t0),
                                                        t.prefix_bytes.begin() + static_cast<ptrdiff_t>(t1), target) -
                                       t.prefix_bytes.begin());
    t_mid = std::clamp(t_mid, t0 + 1, t1 - 1 > t0 ? t1 - 1 : t0 + 1);
    needleman_wunsch(s, s0, s_mid, t, t0, t_mid, options, out);
    needleman_wunsch(s, s_mid, s1, t, t_mid, t1, options, out);
    return;
  }
  const auto K = static_cast<size_t>(std::max(options.max_combination, 1));
  const size_t width = m + 1;
  // Scores of the last K + 1 rows (combinations reach K rows up) and the full traceback.
  std::vector<double> rows((K + 1) * width);
  auto score = [&](size_t i, size_t j) -> double& { return rows[(i % (K + 1)) * width + j]; };
  std::vector<uint8_t> trace((n + 1) * width);
  for (size_t i = 0; i <= n; ++i) {
    for (size_t j = 0; j <= m; ++j) {
      if (i == 0 && j == 0) {
        score(0, 0) = 0.0;
        continue;
      }
      double best = -std::numeric_limits<double>::infinity();
      uint8_t code = kDiag;
      auto consider = [&](double value, uint8_t c) {
        if (value > best) best = value, code = c;
      };
      if (i > 0 && j > 0) {
        consider(score(i - 1, j - 1) + (tokens_equal(s, s0 + i - 1, t, t0 + j - 1) ? options.match : options.mismatch),
                 kDiag);
        for (size_t k = 2; k <= K; ++k) {
          if (j >= k && combines(s, s0 + i - 1, t, t0 + j - k, k)) {
            consider(score(i - 1, j - k) + options.combination_per_token * double(k), uint8_t(kOneToMany + k));
          }
          if (i >= k && combines(t, t0 + j - 1, s, s0 + i - k, k)) {
            consider(score(i - k, j - 1) + options.combination_per_token * double(k), uint8_t(kManyToOne + k));
          }
        }
      }
      if (i > 0) consider(score(i - 1, j) + options.gap, kStudentGap);
      if (j > 0) consider(score(i, j - 1) + options.gap, kTeacherGap);
      score(i, j) = best;
      trace[i * width + j] = code;
    }
  }
  const size_t first = out.size();
  size_t i = n, j = m;
  while (i > 0 || j > 0) {
    const uint8_t code = trace[i * width + j];
    const auto si = int32_t(s0 + i), tj = int32_t(t0 + j);
    if (code == kDiag) {
      out.push_back({si - 1, si, tj - 1, tj, tokens_equal(s, s0 + i - 1, t, t0 + j - 1)});
      --i, --j;
    } else if (code == kStudentGap) {
      out.push_back({si - 1, si, tj, tj, false});
      --i;
    } else if (code == kTeacherGap) {
      out.push_back({si, si, tj - 1, tj, false});
      --j;
    } else if (code >= kManyToOne) {
      const int32_t k = code - kManyToOne;
      out.push_back({si - k, si, tj - 1, tj, true});
      i -= size_t(k), --j;
    } else {
      const int32_t k = code - kOneToMany;
      out.push_back({si - 1, si, tj - k, tj, true});
      --i, j -= size_t(k);
    }
  }
  std::reverse(out.begin() + static_cast<ptrdiff_t>(first), out.end());
}

uint64_t token_hash(const Side& side, size_t k) {
  if (side.special(k)) return 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(side.roles[k]) + 1);
  return std::hash<std::string_view>{}(side.strings[k]);
}

// Anchors: 3-grams of tokens that occur exactly once in each sequence, kept as the longest chain increasing on both
// sides (a spurious far match cannot block the rest) with no two overlapping. Returns student starts and teacher
// starts, in order.
std::vector<std::pair<size_t, size_t>> find_anchors(const Side& s, const Side& t) {
  constexpr size_t kGram = 3;
  if (s.size() < kGram || t.size() < kGram) return {};
  auto gram_hashes = [](const Side& side) {
    std::vector<uint64_t> h(side.size()), out(side.size() - kGram + 1);
    for (size_t k = 0; k < side.size(); ++k) h[k] = token_hash(side, k);
    for (size_t k = 0; k + kGram <= side.size(); ++k) {
      out[k] = h[k] * 0x100000001B3ull ^ (h[k + 1] + 0x9E3779B97F4A7C15ull + (h[k + 2] << 7) + (h[k + 2] >> 3));
    }
    return out;
  };
  const std::vector<uint64_t> hs = gram_hashes(s), ht = gram_hashes(t);
  struct Seen {
    int64_t position;
    int32_t count;
  };
  std::unordered_map<uint64_t, Seen> in_teacher;
  in_teacher.reserve(ht.size() * 2);
  for (size_t k = 0; k < ht.size(); ++k) {
    auto [it, fresh] = in_teacher.try_emplace(ht[k], Seen{int64_t(k), 0});
    ++it->second.count;
  }
  std::unordered_map<uint64_t, int32_t> in_student;
  in_student.reserve(hs.size() * 2);
  for (const uint64_t h : hs) ++in_student[h];
  std::vector<std::pair<size_t, size_t>> candidates;
  for (size_t k = 0; k < hs.size(); ++k) {
    if (in_student[hs[k]] != 1) continue;
    const auto it = in_teacher.find(hs[k]);
    if (it == in_teacher.end() || it->second.count != 1) continue;
    const auto tj = static_cast<size_t>(it->second.position);
    bool same = true;  // a hash collision must not become an anchor
    for (size_t q = 0; q < kGram; ++q) same = same && tokens_equal(s, k + q, t, tj + q);
    if (same) candidates.emplace_back(k, tj);
  }
  // Longest chain increasing in the teacher position (candidates are in student order): patience sorting.
  std::vector<size_t> tails, parent(candidates.size(), SIZE_MAX);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const auto it = std::lower_bound(tails.begin(), tails.end(), c, [&](size_t a, size_t value) {
      return candidates[a].second < candidates[value].second;
    });
    if (it != tails.begin()) parent[c] = *(it - 1);
    if (it == tails.end()) {
      tails.push_back(c);
    } else {
      *it = c;
    }
  }
  std::vector<std::pair<size_t, size_t>> chain;
  for (size_t c = tails.empty() ? SIZE_MAX : tails.back(); c != SIZE_MAX; c = parent[c]) chain.push_back(candidates[c]);
  std::reverse(chain.begin(), chain.end());
  std::vector<std::pair<size_t, size_t>> anchors;
  for (const auto& a : chain) {
    if (!anchors.empty() && (a.first < anchors.back().first + kGram || a.second < anchors.back().second + kGram)) {
      continue;
    }
    anchors.push_back(a);
  }
  return anchors;
}

// How far past an unmatched move to look for the point where both sides have again covered the same bytes.
constexpr size_t kRebalanceLookahead = 64;

// Turns the moves into chunks. A matched move is a correct chunk. From an unmatched move (a mismatch or a gap), the
// moves up to the first point where both sides have covered the same string (say "ab" "c" against "a" "bc", or a
// run of "=" cut differently where NW matched one "==" with the other's at another byte) form one region, cut like
// align_by_offsets cuts it at every byte position the two sides share; without such a point within the lookahead,
// the move stays a chunk that is not correct (a mismatch) or an orphan (a gap).
void chunks_from_moves(const Side& s, const Side& t, const std::vector<Move>& moves, std::vector<Chunk>& out) {
  size_t idx = 0;
  std::string s_text, t_text;
  while (idx < moves.size()) {
    const Move& first = moves[idx];
    if (first.equal) {
      out.push_back({first.s0, first.s1, first.t0, first.t1, true});
      ++idx;
      continue;
    }
    size_t found = SIZE_MAX;
    int64_t drift = 0;
    for (size_t q = idx; q < moves.size() && q < idx + kRebalanceLookahead; ++q) {
      const Move& mv = moves[q];
      drift += s.bytes(size_t(mv.s0), size_t(mv.s1)) - t.bytes(size_t(mv.t0), size_t(mv.t1));
      if (drift != 0 || s.bytes(size_t(first.s0), size_t(mv.s1)) == 0) continue;
      s_text.clear(), t_text.clear();
      for (int32_t k = first.s0; k < mv.s1; ++k) s_text += s.strings[size_t(k)];
      for (int32_t k = first.t0; k < mv.t1; ++k) t_text += t.strings[size_t(k)];
      if (s_text == t_text) {
        found = q;
        break;
      }
    }
    if (found == SIZE_MAX) {
      out.push_back({first.s0, first.s1, first.t0, first.t1, false});
      ++idx;
      continue;
    }
    // The region as two sides of one text: spans are the cumulative byte positions.
    auto side_tokens = [](const Side& side, int32_t begin, int32_t end) {
      SideTokens st;
      int64_t at = 0;
      for (int32_t k = begin; k < end; ++k) {
        const int64_t len = static_cast<int64_t>(side.strings[size_t(k)].size());
        st.ids.push_back(k);
        st.spans.push_back({at, at + len});
        st.roles.push_back(side.roles[size_t(k)]);
        at += len;
      }
      return st;
    };
    const Move& last = moves[found];
    const Alignment region = align_by_offsets(side_tokens(s, first.s0, last.s1), side_tokens(t, first.t0, last.t1));
    for (Chunk c : region.chunks) {
      c.student_begin += first.s0, c.student_end += first.s0;
      c.teacher_begin += first.t0, c.teacher_end += first.t0;
      out.push_back(c);
    }
    idx = found + 1;
  }
}

// Whether token k of a side starts inside a UTF-8 character (its first byte is a continuation byte): the pieces of
// one character stay in one chunk, as the offset alignment keeps them.
bool starts_mid_character(const Side& side, size_t k) {
  for (; k < side.size() && !side.special(k); ++k) {
    if (!side.strings[k].empty()) return (static_cast<unsigned char>(side.strings[k][0]) & 0xC0) == 0x80;
  }
  return false;
}

// Joins each chunk with the next while the boundary between them cuts a character on either side.
void join_split_characters(const Side& s, const Side& t, std::vector<Chunk>& chunks) {
  size_t kept = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (kept > 0) {
      Chunk& last = chunks[kept - 1];
      if (starts_mid_character(s, size_t(last.student_end)) || starts_mid_character(t, size_t(last.teacher_end))) {
        last.student_end = chunks[k].student_end;
        last.teacher_end = chunks[k].teacher_end;
        last.correct = last.correct && chunks[k].correct;
        continue;
      }
    }
    chunks[kept++] = chunks[k];
  }
  chunks.resize(kept);
}

}  // namespace

Alignment align_by_strings(std::span<const std::string> student, std::span<const SpecialRole> student_roles,
                           std::span<const std::string> teacher, std::span<const SpecialRole> teacher_roles,
                           const StringAlignmentOptions& options) {
  if (student_roles.size() != student.size() || teacher_roles.size() != teacher.size()) {
    throw InputError(
        fmt::format("align_by_strings: {} student strings with {} roles, {} teacher strings with {} "
                    "roles: give one role per string",
                    student.size(), student_roles.size(), teacher.size(), teacher_roles.size()));
  }
  if (options.max_combination < 1 || options.max_combination > 16) {
    throw InputError(fmt::format("align_by_strings: max_combination {} is outside 1..16", options.max_combination));
  }
  if (student.size() > size_t(std::numeric_limits<int32_t>::max()) ||
      teacher.size() > size_t(std::numeric_limits<int32_t>::max())) {
    throw InputError("align_by_strings: more than 2^31 - 1 tokens on one side: align the text in parts");
  }
  const Side s(student, student_roles), t(teacher, teacher_roles);
  std::vector<Move> moves;
  moves.reserve(std::max(s.size(), t.size()));
  size_t s_at = 0, t_at = 0;
  for (const auto& [sa, ta] : find_anchors(s, t)) {
    needleman_wunsch(s, s_at, sa, t, t_at, ta, options, moves);
    for (size_t q = 0; q < 3; ++q) {
      moves.push_back({int32_t(sa + q), int32_t(sa + q + 1), int32_t(ta + q), int32_t(ta + q + 1), true});
    }
    s_at = sa + 3, t_at = ta + 3;
  }
  needleman_wunsch(s, s_at, s.size(), t, t_at, t.size(), options, moves);
  Alignment alignment;
  alignment.chunks.reserve(moves.size());
  chunks_from_moves(s, t, moves, alignment.chunks);
  join_split_characters(s, t, alignment.chunks);
  return alignment;
}

Alignment align_by_strings(std::span<const std::string> student, std::span<const std::string> teacher,
                           const StringAlignmentOptions& options) {
  auto roles = [](std::span<const std::string> strings) {
    std::vector<SpecialRole> r(strings.size(), SpecialRole::kNone);
    for (size_t k = 0; k < strings.size(); ++k) {
      if (strings[k].empty()) r[k] = SpecialRole::kOther;
    }
    return r;
  };
  const std::vector<SpecialRole> sr = roles(student), tr = roles(teacher);
  return align_by_strings(student, sr, teacher, tr, options);
}

}  // namespace retort::distill::xtoken
