#include "core/util/logging.h"

#include <unistd.h>

#include <array>
#include <iostream>

#include "core/util/error.h"

namespace retort {

std::shared_ptr<ConsoleSink> console_sink() {
  static const std::shared_ptr<ConsoleSink> sink = std::make_shared<ConsoleSink>(std::cerr, false);
  return sink;
}

std::string log_pattern(int rank, bool with_rank_prefix) {
  std::string pattern = "[%Y-%m-%d %H:%M:%S] [%^%l%$] ";
  if (with_rank_prefix) pattern += fmt::format("[rank {}] ", rank);
  return pattern + "%v";
}

void setup_logging(const LoggingOptions& options) {
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  const std::shared_ptr<ConsoleSink> sink = console_sink();
  sink->set_colors(terminal && options.colors);
  auto logger = std::make_shared<spdlog::logger>("retort", sink);
  const bool quiet_rank = options.rank != 0 && !options.all_ranks;
  logger->set_pattern(log_pattern(options.rank, options.all_ranks || options.rank != 0));
  logger->set_level(quiet_rank ? std::max(options.level, spdlog::level::warn) : options.level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

spdlog::level::level_enum parse_log_level(std::string_view name) {
  constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 8> kLevels{{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  }};
  for (const auto& [level_name, level] : kLevels) {
    if (name == level_name) return level;
  }
  throw InputError(fmt::format("unknown log level '{}': use trace, debug, info, warn, error, critical or off", name));
}

}  // namespace retort
