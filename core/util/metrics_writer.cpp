#include "core/util/metrics_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort {

MetricsWriter MetricsWriter::open_for_append(const std::filesystem::path& path, bool truncate) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  const int fd = ::open(path.c_str(), flags, 0666);
  if (fd < 0) throw Error(fmt::format("cannot open metrics file '{}': {}", path.string(), std::strerror(errno)));
  return MetricsWriter(path, fd);
}

MetricsWriter MetricsWriter::create(const std::filesystem::path& path) {
  return open_for_append(path, true);
}

MetricsWriter MetricsWriter::resume(const std::filesystem::path& path, int64_t resumed_step) {
  if (!std::filesystem::exists(path)) return open_for_append(path, false);
  std::istringstream lines(read_file(path));
  std::string kept;
  std::string line;
  size_t dropped = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // An unparsable line is the torn write of a crash: it never finished, so nothing refers to it.
    const bool torn = record.is_discarded() || !record.is_object();
    const bool after_resume =
        !torn && record.contains("step") && record["step"].is_number() && record["step"].get<double>() > resumed_step;
    if (torn || after_resume) {
      ++dropped;
      continue;
    }
    kept += line;
    kept += '\n';
  }
  if (dropped > 0) {
    spdlog::info("metrics: dropped {} record(s) after step {} from '{}' (resumed run)", dropped, resumed_step,
                 path.string());
    write_text_atomic(path, kept);
  }
  return open_for_append(path, false);
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  RETORT_CHECK(fd_ >= 0, "metrics writer for '{}' was moved from", path_.string());
  RETORT_CHECK(record.is_object(), "a metrics record must be a JSON object, got {}", record.dump());
  append_line(record.dump());
}

void MetricsWriter::append_line(const std::string& text) {
  // One write() per line: with O_APPEND the line lands whole even if the process dies right after.
  const std::string line = text + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t written = ::write(fd_, line.data() + done, line.size() - done);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot append to metrics file '{}': {}", path_.string(), std::strerror(errno)));
    }
    done += static_cast<size_t>(written);
  }
}

void MetricsWriter::write(int64_t step, const nlohmann::json& fields) {
  RETORT_CHECK(fields.is_object() || fields.is_null(), "metrics fields must be a JSON object, got {}", fields.dump());
  nlohmann::ordered_json record;
  record["step"] = step;
  if (fields.is_object()) {
    for (const auto& [name, value] : fields.items()) record[name] = value;
  }
  RETORT_CHECK(fd_ >= 0, "metrics writer for '{}' was moved from", path_.string());
  append_line(record.dump());
}

}  // namespace retort
