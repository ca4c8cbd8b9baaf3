#include "core/util/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/util/error.h"
#include "core/util/human_format.h"
#include "core/util/logging.h"

namespace retort {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int detect_terminal_width() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int parsed = std::atoi(columns);
    if (parsed > 0) return parsed;
  }
  return 100;
}

std::string bar(double fraction, int width) {
  const int filled = static_cast<int>(fraction * width);
  std::string text = "[";
  text.append(static_cast<size_t>(filled), '=');
  if (filled < width) {
    text += '>';
    text.append(static_cast<size_t>(width - filled - 1), ' ');
  }
  return text + "]";
}

}  // namespace

ProgressReporter::ProgressReporter(ProgressOptions options) : options_(std::move(options)) {
  RETORT_CHECK(options_.total_steps >= 0 && options_.log_every > 0, "bad progress options: total {} log_every {}",
               options_.total_steps, options_.log_every);
  if (!options_.logger) options_.logger = spdlog::default_logger();
  if (!options_.console) options_.console = console_sink();
  terminal_ =
      options_.mode == ProgressMode::Terminal || (options_.mode == ProgressMode::Auto && ::isatty(STDERR_FILENO) == 1);
  start_time_ = last_time_ = now();
  step_ = last_rate_step_ = options_.start_step;
}

ProgressReporter::~ProgressReporter() {
  if (terminal_ && !finished_ && any_update_) options_.console->clear_status();
}

double ProgressReporter::now() const {
  return options_.clock ? options_.clock() : steady_seconds();
}

double ProgressReporter::elapsed_seconds() const {
  return now() - start_time_;
}

std::optional<double> ProgressReporter::eta_seconds() const {
  if (options_.total_steps == 0 || !std::isfinite(seconds_per_step_)) return std::nullopt;
  // The average over the whole run, not the smoothed step time: periodic work (validation, checkpoints)
  // recurs, and one slow step right after it must not swing the estimate.
  const int64_t done = step_ - options_.start_step;
  const double per_step = done > 0 ? (last_time_ - start_time_) / static_cast<double>(done) : seconds_per_step_;
  return static_cast<double>(std::max<int64_t>(0, options_.total_steps - step_)) * per_step;
}

void ProgressReporter::update(const ProgressUpdate& update) {
  if (finished_) return;
  const double time = now();
  pending_tokens_ += update.tokens;
  total_tokens_ += update.tokens;
  const double dt = time - last_time_;
  // A time step of zero (two updates within the clock's resolution) carries its tokens into the next one.
  if (dt > 0) {
    const double weight = 1.0 - std::exp(-dt / options_.rate_time_constant_s);
    const double rate = static_cast<double>(pending_tokens_) / dt;
    tokens_per_second_ = tokens_per_second_ == 0 ? rate : tokens_per_second_ + weight * (rate - tokens_per_second_);
    const int64_t steps = update.step - last_rate_step_;
    if (steps > 0) {
      const double step_time = dt / static_cast<double>(steps);
      seconds_per_step_ =
          std::isfinite(seconds_per_step_) ? seconds_per_step_ + weight * (step_time - seconds_per_step_) : step_time;
    }
    last_time_ = time;
    last_rate_step_ = update.step;
    pending_tokens_ = 0;
  }
  const bool first = !any_update_;
  step_ = update.step;
  last_ = update;
  any_update_ = true;
  const bool last_step = options_.total_steps > 0 && step_ >= options_.total_steps;

  if (terminal_) {
    if (first || last_step || time - last_draw_time_ >= options_.redraw_interval_s) {
      options_.console->set_status(terminal_line());
      last_draw_time_ = time;
    }
    return;
  }
  if (first || last_step || (step_ - options_.start_step) % options_.log_every == 0) {
    options_.logger->info("{}", status_text());
  }
}

void ProgressReporter::log(std::string_view line) {
  options_.logger->info("{}", line);
}

void ProgressReporter::finish(std::string_view note) {
  if (finished_) return;
  finished_ = true;
  const double elapsed = elapsed_seconds();
  if (terminal_ && any_update_) {
    options_.console->set_status(terminal_line());
    options_.console->keep_status();
  }
  std::string summary =
      fmt::format("{} done: {} steps in {}", options_.label, step_ - options_.start_step, format_duration(elapsed));
  if (total_tokens_ > 0 && elapsed > 0) {
    summary += fmt::format(" | {} tokens, {} tok/s average", format_count(static_cast<double>(total_tokens_)),
                           format_count(static_cast<double>(total_tokens_) / elapsed));
  }
  if (std::isfinite(last_.loss)) summary += fmt::format(" | final loss {:.4f}", last_.loss);
  if (!note.empty()) summary += fmt::format(" | {}", note);
  options_.logger->info("{}", summary);
}

std::string ProgressReporter::fields_text() const {
  std::string text;
  auto add = [&text](const std::string& field) {
    text += " | ";
    text += field;
  };
  if (std::isfinite(last_.loss)) add(fmt::format("loss {:.4f}", last_.loss));
  if (std::isfinite(last_.lr)) add(fmt::format("lr {:.3e}", last_.lr));
  for (const auto& [name, value] : last_.extra) add(fmt::format("{} {:.4g}", name, value));
  if (total_tokens_ > 0) add(fmt::format("{} tok/s", format_count(tokens_per_second_)));
  add(fmt::format("elapsed {}", format_duration(elapsed_seconds())));
  if (options_.total_steps > 0) {
    const auto eta = eta_seconds();
    add(fmt::format("ETA {}", eta ? format_duration(*eta) : "?"));
  }
  return text;
}

std::string ProgressReporter::status_text() const {
  std::string head = fmt::format("{} {}", options_.label, step_);
  if (options_.total_steps > 0) {
    head += fmt::format("/{} ({:.1f}%)", options_.total_steps,
                        100.0 * static_cast<double>(step_) / static_cast<double>(options_.total_steps));
  }
  return head + fields_text();
}

int ProgressReporter::width() const {
  return options_.terminal_width > 0 ? options_.terminal_width : detect_terminal_width();
}

std::string ProgressReporter::terminal_line() const {
  const std::string fields = fields_text();
  std::string line = fmt::format("{} {}", options_.label, step_);
  const int columns = width();
  if (options_.total_steps > 0) {
    const double fraction =
        std::clamp(static_cast<double>(step_) / static_cast<double>(options_.total_steps), 0.0, 1.0);
    line += fmt::format("/{} {:3.0f}%", options_.total_steps, 100.0 * fraction);
    // The bar takes what the fields leave over, within limits, so the line never wraps (a wrapped line
    // cannot be redrawn with \r).
    const int spare = columns - 1 - static_cast<int>(line.size() + fields.size()) - 3;
    const int bar_width = std::min(30, spare);
    if (bar_width >= 10) {
      line += ' ';
      line += bar(fraction, bar_width);
    }
  }
  line += fields;
  if (static_cast<int>(line.size()) > columns - 1) line.resize(static_cast<size_t>(std::max(columns - 1, 0)));
  return line;
}

}  // namespace retort
