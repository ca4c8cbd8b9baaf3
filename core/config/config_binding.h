#pragma once
// A settings struct read from resolved config keys through one table of (key, member) pairs, instead of one
// hand-written assignment per field: the table is the whole mapping, so adding a key is one line and a key can
// never be read into the wrong field type (the member pointer's type picks the getter).
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/config/resolved_config.h"

namespace retort {

template <typename Settings>
class ConfigBinding {
 public:
  using Member = std::variant<int64_t Settings::*, double Settings::*, bool Settings::*, std::string Settings::*,
                              uint64_t Settings::*, std::filesystem::path Settings::*>;

  ConfigBinding(std::initializer_list<std::pair<const char*, Member>> fields) : fields_(fields) {}

  // Every bound field of `out` set from its key (the other fields keep their values).
  void read(const ResolvedConfig& config, Settings& out) const {
    for (const auto& [key, member] : fields_) {
      std::visit(
          [&, key = key](auto pointer) {
            using Field = std::remove_reference_t<decltype(out.*pointer)>;
            if constexpr (std::is_same_v<Field, int64_t>) {
              out.*pointer = config.get_int(key);
            } else if constexpr (std::is_same_v<Field, uint64_t>) {
              out.*pointer = static_cast<uint64_t>(config.get_int(key));
            } else if constexpr (std::is_same_v<Field, double>) {
              out.*pointer = config.get_double(key);
            } else if constexpr (std::is_same_v<Field, bool>) {
              out.*pointer = config.get_bool(key);
            } else {
              out.*pointer = config.get_string(key);
            }
          },
          member);
    }
  }

  Settings read(const ResolvedConfig& config) const {
    Settings out;
    read(config, out);
    return out;
  }

 private:
  std::vector<std::pair<const char*, Member>> fields_;
};

}  // namespace retort
