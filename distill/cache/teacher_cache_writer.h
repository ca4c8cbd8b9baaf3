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
// `teacher_tokens`: the token stream the cache covers when it is not the student's training split (cross-tokenizer
// distillation: the teacher's own tokens of the student's text, distill/xtoken/paired_stream.h), with the teacher
// tokenizer's fingerprint the cache records; null: the student's training split, whose tokenizer the teacher must use,
// or with distill.xtoken.enabled the paired stream of distill.xtoken.dir (made when missing).
struct TeacherTokenStream {
  TeacherTopKDataset dataset;
  std::string tokenizer_id;
};
TeacherTopKReport write_teacher_cache(const ResolvedConfig& config, Device device,
                                      const TeacherTokenStream* teacher_tokens = nullptr);

}  // namespace retort::distill
