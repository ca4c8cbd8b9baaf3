#include "core/util/error.h"

#include <cstring>

namespace retort {

void throw_check_failure(const char* condition, const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("{} ({}:{}: check '{}' failed)", message, base ? base + 1 : file, line, condition));
}

}  // namespace retort
