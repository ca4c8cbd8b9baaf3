#include "distill/xtoken/common_ids.h"

#include <unordered_map>
#include <vector>

namespace retort::distill::xtoken {

namespace {

struct Candidate {
  int32_t student_id;
  float weight;
  bool exact;
  bool canonical;
};

// Whether a should take the teacher id from b.
bool wins(const Candidate& a, const Candidate& b) {
  if (a.weight != b.weight) return a.weight > b.weight;
  if (a.exact != b.exact) return a.exact;
  if (a.canonical != b.canonical) return a.canonical;
  return a.student_id < b.student_id;
}

// One student id per teacher id, then the pairs by student id.
Tensor pairs_of(const std::vector<std::pair<int32_t, Candidate>>& candidates, int64_t rows) {
  std::unordered_map<int32_t, Candidate> best;
  for (const auto& [teacher_id, candidate] : candidates) {
    const auto [it, inserted] = best.emplace(teacher_id, candidate);
    if (!inserted && wins(candidate, it->second)) it->second = candidate;
  }
  std::vector<int32_t> teacher_of(static_cast<size_t>(rows), -1);
  for (const auto& [teacher_id, candidate] : best) teacher_of[static_cast<size_t>(candidate.student_id)] = teacher_id;
  std::vector<int32_t> flat;
  for (int64_t s = 0; s < rows; ++s) {
    if (teacher_of[static_cast<size_t>(s)] < 0) continue;
    flat.push_back(static_cast<int32_t>(s));
    flat.push_back(teacher_of[static_cast<size_t>(s)]);
  }
  const auto n = static_cast<int64_t>(flat.size() / 2);
  return Tensor::from_ints(flat, {n, 2});
}

}  // namespace

CommonIds common_ids(const StudentTeacherProjection& projection) {
  const std::vector<int32_t> offsets = projection.matrix.row_offsets.to_ints();
  const std::vector<int32_t> ids = projection.matrix.teacher_ids.to_ints();
  const std::vector<float> weights = projection.matrix.weights.to_floats();
  const int64_t rows = projection.matrix.student_vocab;
  std::vector<std::pair<int32_t, Candidate>> strict, relaxed;
  for (int64_t s = 0; s < rows; ++s) {
    const int32_t begin = offsets[static_cast<size_t>(s)], end = offsets[static_cast<size_t>(s) + 1];
    if (begin == end) continue;
    const bool canonical = projection.canonical[static_cast<size_t>(s)] != 0;
    const bool exact = projection.exact[static_cast<size_t>(s)] != 0;
    if (end - begin == 1 && weights[begin] == 1.0f && exact) {
      strict.push_back({ids[begin], {static_cast<int32_t>(s), 1.0f, true, canonical}});
    }
    int32_t top = begin;
    for (int32_t e = begin + 1; e < end; ++e) {
      if (weights[e] > weights[top]) top = e;
    }
    if (weights[top] >= kRelaxedCommonWeight) {
      relaxed.push_back({ids[top], {static_cast<int32_t>(s), weights[top], exact, canonical}});
    }
  }
  return {pairs_of(strict, rows), pairs_of(relaxed, rows)};
}

}  // namespace retort::distill::xtoken
