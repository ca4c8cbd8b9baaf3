#pragma once
// The gold loss's common vocabulary (shared/reference xtoken.md section 3): the student/teacher id pairs that stand
// for the same token, read off the vocabulary projection, one teacher id per student id and one student id per
// teacher id.
//  - strict: rows with exactly one entry, of weight 1, from an exact match (same bytes, or a special by role);
//  - relaxed: rows whose largest weight is at least 0.6, paired with that teacher id (the strict pairs included,
//    and re-encoded tokens whose first teacher piece dominates: two pieces give .909).
// Where several student ids would pair with one teacher id, the higher weight wins, then an exact match, then the
// student's canonical id for those bytes (SentencePiece's piece "A" before its byte piece <0x41>), then the lower
// student id.
#include <cstdint>

#include "core/tensor/tensor.h"
#include "distill/xtoken/vocab_projection.h"

namespace retort::distill::xtoken {

struct CommonIds {
  Tensor strict;   // i32 [n, 2]: (student id, teacher id), by student id
  Tensor relaxed;  // i32 [m, 2], the same form
};

inline constexpr double kRelaxedCommonWeight = 0.6;

CommonIds common_ids(const StudentTeacherProjection& projection);

}  // namespace retort::distill::xtoken
