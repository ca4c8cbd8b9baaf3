#pragma once
// The gold loss of chunk_distillation.h (ChunkLossKind::kGold): the KL over the exactly mapped common id pairs of the
// chunk-averaged log-probabilities plus the L1 distance between each side's sorted uncommon probabilities.
#include <memory>
#include <string_view>

#include "losses/chunk_distillation.h"
#include "losses/chunk_index.h"
#include "parallel/tp/vocab_shard.h"

namespace retort::losses {

// The teacher vocabulary the gold loss reads (projection.teacher_vocab, which must be set; the projection's rows
// are not needed), after checking the common pairs against both vocabularies.
int64_t gold_teacher_vocab(const VocabProjection& projection, const CommonIds& common, std::string_view op);

// T^2 (or 1) * sum over the valid chunks of Gold_c / denominator, recorded as one node on the student.
Tensor gold_loss(const Tensor& student, const chunk_index::ChunkIndex& index, const CommonIds& common,
                 const ChunkDistillationOptions& options, const std::shared_ptr<Communicator>& group,
                 const tp::VocabShard& shard, double denominator);

}  // namespace retort::losses
