#pragma once
// `retort distill topk`: the teacher's top-k cache over the student's training split, written (or resumed) by the
// teacher's exact vocab-parallel top-k pass (teacher_topk.h), with teacher.json recording the teacher and the
// temperature beside the shards.
#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/cache/teacher_topk.h"

namespace retort::distill {

// Writes the cache of distill.teacher over the training split into distill.cache_dir, in windows of
// train.seq_len, at distill.temperature (distill_schema() keys).
TeacherTopKReport write_teacher_cache(const ResolvedConfig& config, Device device);

}  // namespace retort::distill
