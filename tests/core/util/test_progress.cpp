// Progress reporting, the console sink under it, logging set-up and the human-readable formats.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "core/util/error.h"
#include "core/util/logging.h"
#include "core/util/progress.h"
#include "core/util/suggest.h"

namespace retort {
namespace {

struct FakeClock {
  double seconds = 1000.0;
  std::function<double()> function() {
    return [this] { return seconds; };
  }
};

std::shared_ptr<spdlog::logger> logger_into(std::ostringstream& out) {
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  logger->set_pattern("%l %v");
  return logger;
}

// Line mode writing into `out` on `clock`'s time: what every ProgressLines test starts from.
ProgressOptions line_options(std::ostringstream& out, FakeClock& clock) {
  ProgressOptions options;
  options.mode = ProgressMode::Lines;
  options.logger = logger_into(out);
  options.clock = clock.function();
  return options;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// What the terminal shows between carriage returns and newlines, without the erase-line escapes.
std::vector<std::string> visible_pieces(std::string text) {
  for (size_t at; (at = text.find("\x1b[K")) != std::string::npos;) text.erase(at, 3);
  std::vector<std::string> pieces;
  std::string piece;
  for (char c : text) {
    if (c == '\r' || c == '\n') {
      if (!piece.empty()) pieces.push_back(piece);
      piece.clear();
    } else {
      piece += c;
    }
  }
  if (!piece.empty()) pieces.push_back(piece);
  return pieces;
}

TEST(ProgressLines, LogsEveryNStepsWithAllFields) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions options = line_options(out, clock);
  options.label = "train";
  options.total_steps = 100;
  options.log_every = 10;
  ProgressReporter progress(options);
  EXPECT_FALSE(progress.terminal());
  for (int step = 1; step <= 100; ++step) {
    clock.seconds += 0.5;  // 2 steps/s, 1000 tokens per step
    progress.update({.step = step, .loss = 5.0 - step * 0.01, .lr = 3e-4, .tokens = 1000, .extra = {{"gnorm", 0.75}}});
    if (step == 50) progress.log("eval loss 4.2");
  }
  progress.finish("best eval 4.2");
  const std::string text = out.str();
  // The first step and every 10th (10..100): 11 lines.
  EXPECT_EQ(count(text, "/100 ("), 11u) << text;
  EXPECT_NE(text.find("info train 20/100 (20.0%) | loss 4.8000 | lr 3.000e-04 | gnorm 0.75 | 2.0k tok/s | elapsed "
                      "10.0s | ETA 40.0s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("info eval loss 4.2"), std::string::npos);
  EXPECT_NE(text.find("train done: 100 steps in 50.0s | 100.0k tokens, 2.0k tok/s average | final loss 4.0000 | "
                      "best eval 4.2"),
            std::string::npos)
      << text;
  EXPECT_EQ(progress.eta_seconds().value(), 0.0);
}

TEST(ProgressLines, ResumedRunCountsFromItsStartStep) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions options = line_options(out, clock);
  options.total_steps = 100;
  options.start_step = 60;
  options.log_every = 20;
  ProgressReporter progress(options);
  for (int step = 61; step <= 80; ++step) {
    clock.seconds += 1.0;
    progress.update({.step = step});
  }
  EXPECT_NE(out.str().find("step 80/100 (80.0%)"), std::string::npos) << out.str();
  EXPECT_NEAR(progress.eta_seconds().value(), 20.0, 1e-9);
  EXPECT_DOUBLE_EQ(progress.elapsed_seconds(), 20.0);
  progress.finish();
  EXPECT_NE(out.str().find("step done: 20 steps in 20.0s"), std::string::npos) << out.str();
}

TEST(ProgressLines, UnknownTotalHasNoEta) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions options = line_options(out, clock);
  options.log_every = 1;
  ProgressReporter progress(options);
  clock.seconds += 2;
  progress.update({.step = 1, .tokens = 512});
  EXPECT_FALSE(progress.eta_seconds().has_value());
  EXPECT_EQ(progress.status_text(), "step 1 | 256 tok/s | elapsed 2.0s");
}

TEST(ProgressTerminal, OneRedrawnLineWithLogLinesAbove) {
  std::ostringstream screen;
  auto console = std::make_shared<ConsoleSink>(screen);
  auto logger = std::make_shared<spdlog::logger>("console", console);
  logger->set_pattern("%v");
  FakeClock clock;
  ProgressOptions options;
  options.label = "train";
  options.total_steps = 4;
  options.mode = ProgressMode::Terminal;
  options.terminal_width = 120;
  options.redraw_interval_s = 0;
  options.logger = logger;
  options.console = console;
  options.clock = clock.function();
  {
    ProgressReporter progress(options);
    clock.seconds += 1;
    progress.update({.step = 1, .loss = 3.0, .lr = 1e-3, .tokens = 100});
    logger->info("checkpoint saved");  // any log line, not only progress.log()
    clock.seconds += 1;
    progress.update({.step = 2, .loss = 2.5, .lr = 1e-3, .tokens = 100});
    progress.finish();
  }
  const std::string text = screen.str();
  // Each draw starts at column 0 and clears what a longer previous line left.
  EXPECT_NE(text.find("\rtrain 1/4  25% [=======>"), std::string::npos) << text;
  EXPECT_NE(text.find("loss 3.0000 | lr 1.000e-03 | 100 tok/s | elapsed 1.0s | ETA 3.0s\x1b[K"), std::string::npos)
      << text;
  // The log line erases the bar, prints on its own line, and the bar is redrawn under it.
  EXPECT_NE(text.find("\r\x1b[Kcheckpoint saved\ntrain 1/4"), std::string::npos) << text;
  // finish() leaves the last bar on screen, ends its line, then prints the summary.
  EXPECT_NE(text.find("train 2/4  50%"), std::string::npos);
  EXPECT_NE(text.find("\x1b[K\ntrain done: 2 steps in 2.0s"), std::string::npos) << text;
  EXPECT_EQ(count(text, "\n"), 3u) << text;  // the log line, the kept bar, the summary
  for (const std::string& piece : visible_pieces(text)) {
    EXPECT_LE(piece.size(), 119u) << piece;  // never wider than the terminal, so \r can redraw it
  }
}

TEST(ProgressTerminal, NarrowTerminalDropsTheBarAndTruncates) {
  std::ostringstream screen;
  auto console = std::make_shared<ConsoleSink>(screen);
  ProgressOptions options;
  options.total_steps = 1000;
  options.mode = ProgressMode::Terminal;
  options.terminal_width = 40;
  options.console = console;
  options.logger = std::make_shared<spdlog::logger>("narrow", console);
  ProgressReporter progress(options);
  progress.update({.step = 5, .loss = 1.0, .lr = 1.0});
  const std::string text = screen.str();
  EXPECT_EQ(text.find("[="), std::string::npos) << text;
  EXPECT_EQ(text.find("[>"), std::string::npos) << text;
  for (const std::string& piece : visible_pieces(text)) EXPECT_LE(piece.size(), 39u) << piece;
  EXPECT_EQ(visible_pieces(text).at(0).substr(0, 16), "step 5/1000   0%");
}

TEST(ProgressDuration, FormatsLikeAClock) {
  EXPECT_EQ(format_duration(0), "0.0s");
  EXPECT_EQ(format_duration(12.34), "12.3s");
  EXPECT_EQ(format_duration(59.97), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3600 + 2 * 60 + 10), "1h02m");
  EXPECT_EQ(format_duration(100 * 3600.0), "100h00m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(45210), "45.2k");
  EXPECT_EQ(format_count(1.234e6), "1.23M");
}

TEST(ProgressLogging, PatternLevelsAndRankQuiet) {
  EXPECT_EQ(parse_log_level("debug"), spdlog::level::debug);
  EXPECT_THROW(parse_log_level("loud"), InputError);
  EXPECT_EQ(log_pattern(3, true).find("[rank 3] "), log_pattern(3, true).size() - std::string("[rank 3] %v").size());
  EXPECT_EQ(log_pattern(0, false).find("rank"), std::string::npos);

  setup_logging({.rank = 2});
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);  // other ranks stay quiet
  setup_logging({.rank = 2, .all_ranks = true, .level = spdlog::level::debug});
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
  setup_logging({});
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
  EXPECT_EQ(spdlog::default_logger()->sinks().front(), console_sink());
}

TEST(ProgressSuggest, EditDistanceAndClosestMatch) {
  EXPECT_EQ(edit_distance("n_layer", "n_layer"), 0u);
  EXPECT_EQ(edit_distance("n_layr", "n_layer"), 1u);
  EXPECT_EQ(edit_distance("nlayer", "n_layer"), 1u);
  EXPECT_EQ(edit_distance("n_laeyr", "n_layer"), 1u);  // a transposition is one edit
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  const std::vector<std::string> keys = {"model.n_layer", "model.n_head", "optim.lr"};
  EXPECT_EQ(closest_match("model.n_layr", keys).value(), "model.n_layer");
  EXPECT_EQ(closest_match("n_haed", keys).value(), "model.n_head");
  EXPECT_FALSE(closest_match("completely_different", keys).has_value());
  EXPECT_EQ(did_you_mean("optim.rl", keys), " (did you mean 'optim.lr'?)");
}

}  // namespace
}  // namespace retort
