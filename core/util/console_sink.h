#pragma once
// The terminal sink behind all logging. It can hold one "status line" (a progress bar) at the bottom of
// the terminal: every log message first erases the status line, prints itself, then redraws the status
// line below, so bars and log lines never overwrite each other.
#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <ostream>
#include <string>

namespace retort {

class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // `colors`: ANSI level colours (only sensible when `out` is a terminal).
  explicit ConsoleSink(std::ostream& out, bool colors = false);

  // Draws (or replaces) the status line; `line` must not contain a newline.
  void set_status(const std::string& line);
  // Erases the status line from the screen.
  void clear_status();
  void set_colors(bool colors);

  // Leaves the status line on screen as ordinary output and ends it with a newline.
  void keep_status();

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  void erase_status_locked();

  std::ostream& out_;
  bool colors_;  // guarded by mutex_, like everything the sink writes
  std::string status_;
};

}  // namespace retort
