#include "core/util/console_sink.h"

#include <string_view>

namespace retort {
namespace {

constexpr std::string_view kEraseLine = "\r\x1b[K";

std::string_view level_color(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "\x1b[37m";
    case spdlog::level::debug:
      return "\x1b[36m";
    case spdlog::level::info:
      return "\x1b[32m";
    case spdlog::level::warn:
      return "\x1b[33m\x1b[1m";
    case spdlog::level::err:
      return "\x1b[31m\x1b[1m";
    case spdlog::level::critical:
      return "\x1b[1m\x1b[41m";
    default:
      return "";
  }
}

}  // namespace

ConsoleSink::ConsoleSink(std::ostream& out, bool colors) : out_(out), colors_(colors) {}

void ConsoleSink::erase_status_locked() {
  if (!status_.empty()) out_ << kEraseLine;
}

void ConsoleSink::set_status(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  // \r then the line then "erase to end of line": a shorter line leaves no tail of the previous one.
  out_ << '\r' << line << "\x1b[K";
  out_.flush();
  status_ = line;
}

void ConsoleSink::set_colors(bool colors) {
  std::lock_guard<std::mutex> lock(mutex_);
  colors_ = colors;
}

void ConsoleSink::clear_status() {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_status_locked();
  out_.flush();
  status_.clear();
}

void ConsoleSink::keep_status() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!status_.empty()) out_ << '\n';
  out_.flush();
  status_.clear();
}

void ConsoleSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  erase_status_locked();
  const std::string_view text(formatted.data(), formatted.size());
  if (colors_ && msg.color_range_end > msg.color_range_start) {
    out_ << text.substr(0, msg.color_range_start) << level_color(msg.level)
         << text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start) << "\x1b[0m"
         << text.substr(msg.color_range_end);
  } else {
    out_ << text;
  }
  if (!status_.empty()) out_ << status_ << "\x1b[K";
  out_.flush();
}

void ConsoleSink::flush_() {
  out_.flush();
}

}  // namespace retort
