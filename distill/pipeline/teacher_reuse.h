#pragma once
// Whether the teacher `distill run` finds in run.dir/teacher is the one its config describes: a teacher is reused
// (or resumed) only when its shape and its data are the config's, since a cache and two students built on another
// teacher would answer another question. A mismatch is an InputError naming the key, both values and the fix; it
// is never trained over silently.
#include <filesystem>

#include "core/config/resolved_config.h"

namespace retort::distill {

// `teacher_config`: the run config the pipeline derives for its teacher (model.* from teacher.*). Does nothing when
// `teacher_dir` holds no run yet. `own_tokenizer`: a cross-tokenizer teacher, whose data.* keys the pipeline's
// teacher.data.* set (the error names those).
void check_teacher_matches(const std::filesystem::path& teacher_dir, const ResolvedConfig& teacher_config,
                           bool own_tokenizer = false);

}  // namespace retort::distill
