#pragma once
// What a training run logs per step: metrics.jsonl (core/util/metrics_writer.h: one JSON object per line, written
// through) and metrics.csv beside it, the same records as a table with a fixed header (spreadsheets, pandas,
// gnuplot; there is no TensorBoard writer in C++ that Debian packages, and a CSV needs none). Every record gets the
// wall clock: "time", Unix seconds with milliseconds, and "elapsed", seconds of training since the run started (a
// resumed run continues from the elapsed of the step it resumed at, so the time lost to a crash is not counted).
// A resumed run rewrites metrics.csv from the records metrics.jsonl kept, so both files always hold the same steps.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/util/metrics_writer.h"

namespace retort::distill {

// metrics.csv's header: every field a training record may hold, in this order. A record field missing from it is an
// internal error (add the column here), so the header never changes under a reader.
const std::vector<std::string>& metrics_csv_columns();

// One record as a CSV line (no newline): the columns' values as JSON numbers or strings, empty where absent.
std::string metrics_csv_line(const nlohmann::json& record);

class RunMetricsLog {
 public:
  // A new run: both files started afresh in run_dir.
  static RunMetricsLog create(const std::filesystem::path& run_dir);
  // A run resumed at `resumed_step`: later records are dropped (MetricsWriter::resume) and the CSV rebuilt.
  static RunMetricsLog resume(const std::filesystem::path& run_dir, int64_t resumed_step);

  // Writes {"step", fields..., "time", "elapsed"} to both files.
  void write(int64_t step, const nlohmann::json& fields);

 private:
  RunMetricsLog(MetricsWriter jsonl, const std::filesystem::path& csv_path, double elapsed_before);

  MetricsWriter jsonl_;
  std::ofstream csv_;
  std::filesystem::path csv_path_;
  double elapsed_before_ = 0;  // seconds of training before this process (a resumed run)
  std::chrono::steady_clock::time_point start_;
};

}  // namespace retort::distill
