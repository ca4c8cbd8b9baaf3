#include "distill/train/run_metrics_log.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

constexpr const char* kJsonl = "metrics.jsonl";
constexpr const char* kCsv = "metrics.csv";

std::string csv_header() {
  std::string header;
  for (const std::string& column : metrics_csv_columns()) header += (header.empty() ? "" : ",") + column;
  return header + "\n";
}

double unix_seconds_ms() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()) / 1000.0;
}

}  // namespace

const std::vector<std::string>& metrics_csv_columns() {
  static const std::vector<std::string> columns{
      "step", "time", "elapsed", "loss", "ce", "kd", "lr", "grad_norm", "tokens_per_s", "tokens", "eval_loss",
      "eval_ppl", "eval_kl_to_teacher", "eval_top1_agreement",
      // cross-tokenizer students (objectives/xtoken_objective.h)
      "chunk_coverage", "chunks", "xtoken_batch_ms", "teacher_ms",
      // on-policy students (objectives/on_policy_objective.h)
      "batch_kind", "on_policy_reverse_kl", "on_policy_forward_kl", "on_policy_mixed", "eval_on_policy_reverse_kl",
      "eval_on_policy_forward_kl"};
  return columns;
}

std::string metrics_csv_line(const nlohmann::json& record) {
  const std::vector<std::string>& columns = metrics_csv_columns();
  for (const auto& [name, value] : record.items())
    RETORT_CHECK(std::find(columns.begin(), columns.end(), name) != columns.end(),
                 "the metrics record field \"{}\" has no metrics.csv column: add it to metrics_csv_columns() "
                 "(distill/train/run_metrics_log.cpp)",
                 name);
  std::string line;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) line += ',';
    const auto it = record.find(columns[i]);
    if (it == record.end() || it->is_null()) continue;
    line += it->is_string() ? it->get<std::string>() : it->dump();
  }
  return line;
}

RunMetricsLog::RunMetricsLog(MetricsWriter jsonl, const fs::path& csv_path, double elapsed_before)
    : jsonl_(std::move(jsonl)),
      csv_(csv_path, std::ios::app),
      csv_path_(csv_path),
      elapsed_before_(elapsed_before),
      start_(std::chrono::steady_clock::now()) {
  RETORT_CHECK(csv_.good(), "cannot open {} for writing", csv_path.string());
}

RunMetricsLog RunMetricsLog::create(const fs::path& run_dir) {
  write_text_atomic(run_dir / kCsv, csv_header());
  return RunMetricsLog(MetricsWriter::create(run_dir / kJsonl), run_dir / kCsv, 0.0);
}

RunMetricsLog RunMetricsLog::resume(const fs::path& run_dir, int64_t resumed_step) {
  MetricsWriter jsonl = MetricsWriter::resume(run_dir / kJsonl, resumed_step);
  std::string csv = csv_header();
  double elapsed = 0;
  if (fs::exists(run_dir / kJsonl)) {
    std::istringstream lines(read_file(run_dir / kJsonl));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded() || !record.is_object()) continue;
      csv += metrics_csv_line(record) + "\n";
      if (record.contains("elapsed") && record["elapsed"].is_number()) elapsed = record["elapsed"].get<double>();
    }
  }
  write_text_atomic(run_dir / kCsv, csv);
  return RunMetricsLog(std::move(jsonl), run_dir / kCsv, elapsed);
}

void RunMetricsLog::write(int64_t step, const nlohmann::json& fields) {
  nlohmann::json record = fields;
  record["time"] = unix_seconds_ms();
  const double elapsed =
      elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  record["elapsed"] = std::round(elapsed * 1000.0) / 1000.0;
  jsonl_.write(step, record);
  record["step"] = step;
  csv_ << metrics_csv_line(record) << '\n' << std::flush;
}

}  // namespace retort::distill
