#pragma once
// One method of `retort distill compare`, run in its own folder of run.dir: its teacher cache (when it reads one)
// in method_dir/cache, its student in method_dir/student, the held-out evaluation against the shared teacher, and
// method.json last.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/compare/compare_methods.h"
#include "distill/compare/method_result.h"
#include "distill/train/evaluation.h"

namespace retort::distill {

// The method's config: `base` with the method's overrides, the shared teacher and its folders. Empty, with the
// config's error in `error`, when this build does not know one of the method's keys (a method of a newer build).
struct MethodConfig {
  std::optional<ResolvedConfig> config;
  std::string error;
};
MethodConfig method_config_of(const CompareMethod& method, const ResolvedConfig& base,
                              const std::filesystem::path& method_dir, const std::filesystem::path& teacher_dir);

// What every method is scored with: the shared teacher, the held-out split and the bytes of each token id.
struct MethodEvaluation {
  const TrainedModel* teacher = nullptr;
  std::vector<std::filesystem::path> val_shards;
  std::vector<int32_t> token_bytes;
  EvalOptions options;
  Device device = Device::cpu();
};

// What a finished method's record must match to be kept: its resolved config (every key, the teacher.* ones
// included) and the teacher checkpoint it learnt from (a named teacher may have trained on since).
std::string method_fingerprint(const ResolvedConfig& method_config, const std::filesystem::path& teacher_dir);

// Runs the method from scratch in `method_dir` (which must hold nothing of an earlier attempt) and writes its
// method.json. The wall time counts the cache and the student's training, not the evaluation (the same for all).
MethodResult run_compare_method(const CompareMethod& method, const ResolvedConfig& method_config,
                                const std::string& fingerprint, const std::filesystem::path& method_dir, Device device,
                                const MethodEvaluation& evaluation);

// The bytes of every file under `dir` (0 when it does not exist).
int64_t folder_bytes(const std::filesystem::path& dir);

}  // namespace retort::distill
