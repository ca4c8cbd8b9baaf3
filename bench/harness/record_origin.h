#pragma once
// Where a benchmark record came from: the commit, the device and the day. Numbers outlive the run that made
// them (they are pasted into docs/benchmarks.md and compared months later), and without these a JSON line
// cannot say which code on which GPU produced it.
#include <string>

namespace retort::bench {

inline constexpr const char* kCommitEnv = "RETORT_COMMIT";

struct RecordOrigin {
  std::string commit;  // short hash, or "unknown"
  std::string device;  // the device's name (a GPU's product name, or "cpu")
  std::string date;    // UTC, ISO 8601: 2025-01-31T17:04:05Z
};

// The commit is $RETORT_COMMIT when set (a copy of the tree without its .git, as on a GPU machine, is told it
// that way), else `git rev-parse --short HEAD` in the working directory, else "unknown". The date is now.
RecordOrigin record_origin(const std::string& device_name);

}  // namespace retort::bench
