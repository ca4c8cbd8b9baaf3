#pragma once
// Short human-readable numbers for logs and progress lines.
#include <string>

namespace retort {

// "12.3s", "3m05s", "1h02m"; "?" for a negative or non-finite value (an ETA that is not known yet).
std::string format_duration(double seconds);

// "950", "45.2k", "1.23M", "4.56G": for token counts and rates.
std::string format_count(double value);

}  // namespace retort
