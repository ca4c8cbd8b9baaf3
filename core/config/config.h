#pragma once
// A config as the user wrote it: a YAML file (or string) plus command-line overrides "key.sub=value",
// applied in order on top of the file. Nothing is checked against the application's keys until resolve(),
// which turns it into a typed, fully defaulted ResolvedConfig or throws one InputError that lists every
// problem (unknown keys with a "did you mean", wrong types, out-of-range values), each naming its key and
// where it came from.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"

namespace retort {

class Config {
 public:
  Config() = default;  // empty: everything takes its default (plus overrides)

  static Config load(const std::filesystem::path& path);
  // `source` names the text in messages (a file name, "<string>").
  static Config from_string(std::string_view yaml, std::string source = "<string>");

  // Each override is "dotted.key=value"; the value is read as YAML ("4", "3e-4", "true", "[1, 2]", "'text'").
  // A string key takes the text itself when it is not a single YAML scalar (paths with ':' and the like).
  // Later overrides win. An override without '=' is an InputError here; unknown keys are found by resolve().
  void apply_overrides(const std::vector<std::string>& overrides);
  void apply_override(std::string_view override_text);

  ResolvedConfig resolve(const ConfigSchema& schema) const;

  const std::string& source() const { return source_; }

 private:
  struct Override {
    std::string key;
    std::string value_text;
    std::string original;  // the whole "key=value", for messages
  };

  YAML::Node root_;
  std::string source_;
  std::vector<Override> overrides_;
};

}  // namespace retort
