#include "core/config/flag_hint.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace retort {

std::string config_key_hint(const ConfigSchema& schema, std::string_view flag) {
  if (!flag.starts_with("--")) return {};
  std::string_view name = flag.substr(2);
  std::string value = "VALUE";
  if (const size_t eq = name.find('='); eq != std::string_view::npos) {
    value = std::string(name.substr(eq + 1));
    name = name.substr(0, eq);
  }
  std::string leaf(name);
  std::replace(leaf.begin(), leaf.end(), '-', '_');
  if (leaf.empty()) return {};
  std::vector<std::string> matches;
  for (const std::string& key : schema.keys()) {
    const size_t dot = key.rfind('.');
    // The whole key (`--train.steps`) or its last part (`--steps`).
    if (key == leaf || (dot != std::string::npos && key.substr(dot + 1) == leaf)) matches.push_back(key);
  }
  if (matches.empty()) return {};
  std::string examples;
  for (const std::string& key : matches) examples += fmt::format("{}{}={}", examples.empty() ? "" : " or ", key, value);
  return fmt::format("{} is not an option but a config key: give it as an override, {} (see --help-config)",
                     std::string(flag.substr(0, flag.find('='))), examples);
}

}  // namespace retort
