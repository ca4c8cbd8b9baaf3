#include "core/util/environment_switch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

namespace retort {

bool switched_off_in_environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return v == "0" || v == "off" || v == "false";
}

}  // namespace retort
