#pragma once
// The teacher stage of `retort distill run` and `retort distill compare`: the teacher they train in run.dir/teacher
// (unless distill.teacher names one) has the student's data and optimizer settings with the teacher.* shape and
// budget; a teacher that finished its steps is reused, one that stopped is continued from its latest checkpoint.
#include <filesystem>
#include <string>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"

namespace retort::distill {

// The teacher's run config. With cross-tokenizer distillation, `data_overrides` make it train on its own tokens of
// the students' text.
ResolvedConfig teacher_config_of(const ResolvedConfig& config, const std::filesystem::path& teacher_dir,
                                 const std::vector<std::string>& data_overrides = {});

struct TeacherStageOutcome {
  bool trained = false;  // false: the teacher had finished its steps already
  double seconds = 0;    // training time of this call
};

// Trains the teacher of `teacher_config` (teacher_config_of) in its run.dir up to its train.steps, resuming a run
// that stopped. `command` prefixes the progress lines ("distill run").
TeacherStageOutcome train_or_reuse_teacher(const ResolvedConfig& teacher_config, Device device,
                                           const std::string& command);

}  // namespace retort::distill
