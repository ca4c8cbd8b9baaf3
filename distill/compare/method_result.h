#pragma once
// What one method of `retort distill compare` measured, and its method.json: the record that marks the method
// finished. It is written last (atomically), so a folder without a readable one holds a method that stopped part
// way, which is run again.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "distill/train/evaluation.h"

namespace retort::distill {

inline constexpr const char* kMethodResultFile = "method.json";

struct MethodResult {
  std::string name, title;
  std::vector<std::string> overrides;
  bool available = true;           // false: this build's config refuses the method's keys
  std::string unavailable_reason;  // the config's error, when not available
  std::filesystem::path student_dir;
  EvalReport eval;                   // held out, against the shared teacher
  std::string cache_kind = "none";   // topk, sampled, none
  int64_t cache_tokens = 0;          // rows of the cache it wrote
  int64_t cache_file_bytes = 0;      // every file of its cache folder, as written
  double cache_bytes_per_token = 0;  // cache_file_bytes / cache_tokens (0 without a cache)
  double cache_seconds = 0, train_seconds = 0;
  std::string config_fingerprint;  // method_fingerprint(): its resolved config and its teacher checkpoint
  bool reused = false;             // finished by an earlier run of the comparison (not stored)

  double wall_seconds() const { return cache_seconds + train_seconds; }
};

nlohmann::json method_result_json(const MethodResult& result);
// The finished result in `method_dir`, or nothing when its method.json is missing, unreadable, incomplete, or from a
// config whose fingerprint is not `fingerprint` (the method must then run again).
std::optional<MethodResult> read_finished_method(const std::filesystem::path& method_dir,
                                                 const std::string& fingerprint);

}  // namespace retort::distill
