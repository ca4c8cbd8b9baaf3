#pragma once
// This rank's part of a vocabulary split over a tensor-parallel group, for every op that reads vocab-parallel
// logits (the losses, the vocab top-k, the sampler).
#include <algorithm>
#include <limits>
#include <memory>
#include <string_view>

#include "core/tensor/slicing.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "parallel/comm/communicator.h"

namespace retort::tp {

// This rank's part of a vocabulary split over the tp group in equal shards of `width` columns. When the global
// vocabulary V does not divide by tp, the shards are ceil(V / tp) wide and the last one ends in padding columns
// that are no id (ShardingSpec::full_extent = V): the losses read and differentiate only the `valid` real
// columns, whatever the padding holds, and leave a zero gradient there.
struct VocabShard {
  int64_t start = 0;  // the first global id of this shard
  int64_t width = 0;  // columns of the local logits
  int64_t valid = 0;  // real ids among them: width, except on a padded shard
  int64_t total = 0;  // the global vocabulary V
  bool padded() const { return valid < width; }
};

inline VocabShard vocab_shard(const Tensor& logits, const std::shared_ptr<Communicator>& group, std::string_view op) {
  VocabShard s;
  s.width = logits.size(-1);
  const int tp = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const int64_t extent = logits.sharding().full_extent;
  s.total = group && extent > 0 ? extent : s.width * tp;
  RETORT_INPUT_CHECK(s.total > s.width * (tp - 1) && s.total <= s.width * tp,
                     "{}: a vocabulary of {} ids cannot be split over {} ranks in shards of {} columns (this rank's "
                     "logits {}): every shard must be ceil(V / tp) = {} columns wide and hold at least one id",
                     op, s.total, tp, s.width, logits.describe(), (s.total + tp - 1) / tp);
  s.start = static_cast<int64_t>(rank) * s.width;
  s.valid = std::clamp<int64_t>(s.total - s.start, 0, s.width);
  return s;
}

// The logits [N, width] with only the real columns: a copy of the first `valid` columns on a padded shard, the
// tensor itself elsewhere.
inline Tensor real_columns(const Tensor& rows, const VocabShard& s) {
  return s.padded() ? narrow_copy(rows, 1, 0, s.valid) : rows;
}

// The logits [N, width] with -inf in the padding columns (a copy on a padded shard, the tensor itself elsewhere),
// for the ops that pick ids (top-k, sampling, argmax): a padding column can never be picked.
inline Tensor mask_padding(const Tensor& rows, const VocabShard& s) {
  if (!s.padded()) return rows;
  const Tensor padding = Tensor::full({rows.size(0), s.width - s.valid}, -std::numeric_limits<double>::infinity(),
                                      rows.dtype(), rows.device());
  return concat({narrow_copy(rows, 1, 0, s.valid), padding}, 1);
}

}  // namespace retort::tp
