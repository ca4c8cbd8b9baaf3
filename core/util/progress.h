#pragma once
// Progress of long work (training, evaluation, cache generation). On a terminal: one updating status line
// with step/total, a bar, loss, lr, smoothed tokens/s, elapsed time and ETA. Elsewhere (CI, redirected to a
// file): an ordinary log line with the same fields every `log_every` steps.
#include <spdlog/logger.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/console_sink.h"

namespace retort {

enum class ProgressMode { Auto, Terminal, Lines };  // Auto: Terminal when stderr is a terminal

struct ProgressOptions {
  std::string label = "step";  // first word of every line, e.g. "train", "eval"
  int64_t total_steps = 0;     // 0: unknown (no bar, no ETA)
  int64_t start_step = 0;      // a resumed run starts here; rates and ETA count from it
  int64_t log_every = 10;      // Lines mode: steps between log lines
  ProgressMode mode = ProgressMode::Auto;
  double redraw_interval_s = 0.1;          // Terminal mode: at most this often, plus the last step
  double rate_time_constant_s = 5.0;       // smoothing of tokens/s and step time (exponential, in seconds)
  int terminal_width = 0;                  // 0: ask the terminal
  std::shared_ptr<spdlog::logger> logger;  // null: spdlog's default logger
  std::shared_ptr<ConsoleSink> console;    // null: console_sink(), the sink the default logger writes through
  std::function<double()> clock;           // seconds; null: a steady clock (tests pass a fake)
};

struct ProgressUpdate {
  int64_t step = 0;  // steps completed so far
  double loss = std::numeric_limits<double>::quiet_NaN();
  double lr = std::numeric_limits<double>::quiet_NaN();
  int64_t tokens = 0;                                   // tokens processed since the previous update
  std::vector<std::pair<std::string, double>> extra{};  // shown as "name value", e.g. {"grad_norm", 0.8}
};

class ProgressReporter {
 public:
  explicit ProgressReporter(ProgressOptions options = {});
  ~ProgressReporter();  // erases a still-visible bar; does not print the summary
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void update(const ProgressUpdate& update);

  // A separate info line (an eval result, a checkpoint note) printed above the bar without breaking it.
  void log(std::string_view line);

  // The closing line: steps, time, average tokens/s, last loss, plus `note`. Later calls do nothing.
  void finish(std::string_view note = {});

  bool terminal() const { return terminal_; }
  double elapsed_seconds() const;
  double tokens_per_second() const { return tokens_per_second_; }  // smoothed; 0 before any rate is known
  std::optional<double> eta_seconds() const;

  // The current line as shown in Lines mode (also what tests inspect).
  std::string status_text() const;

 private:
  double now() const;
  std::string fields_text() const;
  std::string terminal_line() const;
  int width() const;

  ProgressOptions options_;
  bool terminal_ = false;
  bool finished_ = false;
  double start_time_ = 0;
  double last_time_ = 0;
  double last_draw_time_ = -1e300;
  int64_t step_ = 0;
  int64_t last_rate_step_ = 0;
  int64_t pending_tokens_ = 0;
  int64_t total_tokens_ = 0;
  double tokens_per_second_ = 0;
  double seconds_per_step_ = std::numeric_limits<double>::quiet_NaN();
  ProgressUpdate last_;
  bool any_update_ = false;
};

}  // namespace retort
