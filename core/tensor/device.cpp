#include "core/tensor/device.h"

#include <charconv>

#include "core/util/error.h"

namespace retort {

std::string Device::str() const {
  return is_cpu() ? "cpu" : fmt::format("cuda:{}", index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda" || text == "gpu") return cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  throw InputError(fmt::format("unknown device '{}': use cpu, cuda or cuda:N", text));
}

}  // namespace retort
