#pragma once
// Process-wide logging set-up: spdlog's default logger writes through the shared ConsoleSink (so progress
// bars and log lines coexist) with a time + level pattern. In a multi-rank run only rank 0 speaks at info
// level; the other ranks report warnings and errors only, prefixed "[rank r]", unless every rank is asked
// to log (then all ranks carry the prefix).
#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

#include "core/util/console_sink.h"
#include "core/util/human_format.h"  // format_duration, format_count: the helpers log lines use

namespace retort {

struct LoggingOptions {
  int rank = 0;
  bool all_ranks = false;  // every rank logs at `level`, each with its [rank r] prefix
  spdlog::level::level_enum level = spdlog::level::info;
  bool colors = true;  // used only when stderr is a terminal
};

// Installs a logger named "retort" as spdlog's default. Safe to call again (e.g. once the rank is known).
void setup_logging(const LoggingOptions& options = {});

// The sink on stderr that every logger set up here writes through; ProgressReporter draws its bar on it.
std::shared_ptr<ConsoleSink> console_sink();

// "trace" | "debug" | "info" | "warn" | "error" | "critical" | "off"; InputError naming the value otherwise.
spdlog::level::level_enum parse_log_level(std::string_view name);

// The pattern setup_logging uses, exposed so tests and extra sinks format identically.
std::string log_pattern(int rank, bool with_rank_prefix);

}  // namespace retort
