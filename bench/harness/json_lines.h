#pragma once
// Benchmark output as JSON lines: one object per line, each carrying its origin (commit, device, date), written
// and flushed as it is measured so that a run cut short keeps what it measured. The PyTorch twins
// (bench/*_torch.py) write the same fields and bench/run_*.sh join the two files line by line.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/harness/record_origin.h"

namespace retort::bench {

// `record` with the origin's fields added where it has none of its own: "commit", "date", and "device". A
// program whose "device" already says something else keeps it (bench_generate's "cuda:0", which its script
// prints) and gets the name as "device_name".
nlohmann::json stamped(nlohmann::json record, const RecordOrigin& origin);

class JsonLinesWriter {
 public:
  enum class Mode { Truncate, Append };

  // Opens `path` (an InputError, naming the --json option, when it cannot be written).
  JsonLinesWriter(const std::string& path, Mode mode, RecordOrigin origin);

  // Writes the stamped record as one line and flushes it.
  void write(const nlohmann::json& record);

  const RecordOrigin& origin() const { return origin_; }

 private:
  std::ofstream out_;
  RecordOrigin origin_;
};

}  // namespace retort::bench
