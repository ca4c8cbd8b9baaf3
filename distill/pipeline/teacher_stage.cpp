#include "distill/pipeline/teacher_stage.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "distill/pipeline/stage_runs.h"
#include "distill/train/training_loop.h"

namespace retort::distill {

namespace fs = std::filesystem;

ResolvedConfig teacher_config_of(const ResolvedConfig& config, const fs::path& teacher_dir,
                                 const std::vector<std::string>& data_overrides) {
  std::vector<std::string> overrides{
      "run.dir=" + teacher_dir.string(),
      fmt::format("model.n_layer={}", config.get_int("teacher.n_layer")),
      fmt::format("model.n_head={}", config.get_int("teacher.n_head")),
      fmt::format("model.n_embd={}", config.get_int("teacher.n_embd")),
      fmt::format("train.steps={}", config.get_int("teacher.steps")),
      fmt::format("train.checkpoint_every={}", config.get_int("teacher.checkpoint_every")),
      fmt::format("optim.lr={}", config.get_double("teacher.lr")),
      fmt::format("optim.min_lr={}", config.get_double("teacher.min_lr"))};
  overrides.insert(overrides.end(), data_overrides.begin(), data_overrides.end());
  return derived_config(config, overrides);
}

TeacherStageOutcome train_or_reuse_teacher(const ResolvedConfig& teacher_config, Device device,
                                           const std::string& command) {
  TeacherStageOutcome outcome;
  const fs::path teacher_dir = teacher_config.get_string("run.dir");
  const int64_t done = finished_steps(teacher_dir);
  if (done >= teacher_config.get_int("train.steps")) {
    spdlog::info("{}: using the trained teacher in {} ({} steps)", command, teacher_dir.string(), done);
    return outcome;
  }
  spdlog::info("{}: training the teacher in {}{}", command, teacher_dir.string(),
               done > 0 ? fmt::format(" (resuming at step {})", done) : std::string());
  // Every rank reads the folder before any writes: the stage's own rendezvous comes first.
  const RunStart start = stage_start(teacher_dir);
  const auto clock = std::chrono::steady_clock::now();
  run_label_training(teacher_config, device, start);
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock).count();
  outcome.trained = true;
  return outcome;
}

}  // namespace retort::distill
