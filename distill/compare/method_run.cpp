#include "distill/compare/method_run.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "core/data/content_hash.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/distill_training.h"
#include "distill/pipeline/stage_runs.h"
#include "distill/train/checkpoint.h"
#include "distill/train/training_loop.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

MethodConfig method_config_of(const CompareMethod& method, const ResolvedConfig& base, const fs::path& method_dir,
                              const fs::path& teacher_dir) {
  std::vector<std::string> overrides = method.overrides;
  overrides.insert(overrides.end(),
                   {"run.dir=" + (method_dir / "student").string(), "distill.teacher=" + teacher_dir.string(),
                    "distill.cache_dir=" + (method_dir / "cache").string()});
  MethodConfig out;
  try {
    out.config = derived_config(base, overrides);
  } catch (const InputError& e) {
    out.error = e.what();
  }
  return out;
}

int64_t folder_bytes(const fs::path& dir) {
  int64_t bytes = 0;
  if (!fs::exists(dir)) return 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) bytes += static_cast<int64_t>(entry.file_size());
  return bytes;
}

std::string method_fingerprint(const ResolvedConfig& method_config, const fs::path& teacher_dir) {
  const fs::path teacher_checkpoint = latest_checkpoint(teacher_dir).value_or(teacher_dir);
  return data::content_hash_hex(method_config.to_yaml() + "\n# teacher checkpoint: " + teacher_checkpoint.string());
}

MethodResult run_compare_method(const CompareMethod& method, const ResolvedConfig& config,
                                const std::string& fingerprint, const fs::path& method_dir, Device device,
                                const MethodEvaluation& evaluation) {
  MethodResult result;
  result.name = method.name;
  result.title = method.title;
  result.overrides = method.overrides;
  result.config_fingerprint = fingerprint;
  result.student_dir = config.get_string("run.dir");
  fs::create_directories(method_dir);

  if (method.writes_cache) {
    const auto clock = std::chrono::steady_clock::now();
    const TeacherTopKReport written = write_teacher_cache(config, device);
    result.cache_seconds = seconds_since(clock);
    result.cache_kind = config.get_string("distill.cache_kind");
    result.cache_tokens = written.cache_tokens;
    // The files as they lie on disk (shard headers and teacher.json included), not the record size alone.
    result.cache_file_bytes = folder_bytes(config.get_string("distill.cache_dir"));
    RETORT_CHECK(result.cache_tokens > 0, "the {} cache of {} holds no rows", result.cache_kind, method.name);
    result.cache_bytes_per_token = static_cast<double>(result.cache_file_bytes) / result.cache_tokens;
  }

  const auto clock = std::chrono::steady_clock::now();
  if (method.uses_teacher_signal)
    run_distill_training(config, device, RunStart::kNew);
  else
    run_label_training(config, device, RunStart::kNew);
  result.train_seconds = seconds_since(clock);

  const TrainedModel student = load_trained_model(result.student_dir, evaluation.device);
  result.eval =
      evaluate_model(student, evaluation.val_shards, evaluation.options, evaluation.teacher, &evaluation.token_bytes);
  write_text_atomic(method_dir / kMethodResultFile, method_result_json(result).dump(2));
  return result;
}

}  // namespace retort::distill
