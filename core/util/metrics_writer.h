#pragma once
// metrics.jsonl: one JSON object per line, written through to the kernel as each line is added, so a run
// that crashes keeps every metric it logged. A resumed run first drops the lines the lost steps wrote, so
// the file never holds two records for one step.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace retort {

class MetricsWriter {
 public:
  // A new file; an existing one is replaced.
  static MetricsWriter create(const std::filesystem::path& path);
  // Continues a run resumed from `resumed_step`: keeps records with "step" <= resumed_step and records
  // without a step, drops later ones and a torn last line, then appends. A missing file starts empty.
  static MetricsWriter resume(const std::filesystem::path& path, int64_t resumed_step);

  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&& other) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  // `record` must be a JSON object.
  void write(const nlohmann::json& record);
  // Same, with "step" put first.
  void write(int64_t step, const nlohmann::json& fields);

  const std::filesystem::path& path() const { return path_; }

 private:
  MetricsWriter(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  static MetricsWriter open_for_append(const std::filesystem::path& path, bool truncate);
  void append_line(const std::string& text);

  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace retort
