#include "core/util/human_format.h"

#include <fmt/format.h>

#include <cmath>

namespace retort {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  // Round before choosing the unit, so 59.97s prints as "1m00s" rather than "60.0s".
  if (std::round(seconds * 10) / 10 < 60) return fmt::format("{:.1f}s", seconds);
  const long long whole = std::llround(seconds);
  if (whole < 3600) return fmt::format("{}m{:02d}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02d}m", whole / 3600, (whole % 3600) / 60);
}

std::string format_count(double value) {
  if (!std::isfinite(value)) return "?";
  const double magnitude = std::fabs(value);
  if (magnitude < 1e3) return fmt::format("{:.0f}", value);
  if (magnitude < 1e6) return fmt::format("{:.1f}k", value / 1e3);
  if (magnitude < 1e9) return fmt::format("{:.2f}M", value / 1e6);
  return fmt::format("{:.2f}G", value / 1e9);
}

}  // namespace retort
