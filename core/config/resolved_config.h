#pragma once
// A validated config: every key the schema declares has a typed value (set or defaulted). Asking for a key
// the schema does not declare, or with the wrong type, is a programming error (RETORT_CHECK), not an input
// error: the user cannot cause it.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config_schema.h"

namespace retort {

class ResolvedConfig {
 public:
  int64_t get_int(std::string_view key) const;
  double get_double(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<int64_t>& get_int_list(std::string_view key) const;
  const std::vector<double>& get_double_list(std::string_view key) const;
  const std::vector<std::string>& get_string_list(std::string_view key) const;
  const ConfigValue& get(std::string_view key) const;

  // Where the value came from: "default", "<file>:<line>", or "override '<key>=<value>'".
  const std::string& origin(std::string_view key) const;
  bool is_default(std::string_view key) const { return origin(key) == "default"; }

  // The whole config as nested YAML in declaration order; loading it back with Config::load and resolving
  // with the same schema gives identical values (floats keep all their bits). With descriptions, each key
  // carries its description as a trailing comment.
  std::string to_yaml(bool with_descriptions = false) const;

  const ConfigSchema& schema() const { return *schema_; }

 private:
  friend class Config;
  ResolvedConfig(std::shared_ptr<const ConfigSchema> schema, std::map<std::string, ConfigValue, std::less<>> values,
                 std::map<std::string, std::string, std::less<>> origins)
      : schema_(std::move(schema)), values_(std::move(values)), origins_(std::move(origins)) {}

  template <typename T>
  const T& typed(std::string_view key, ConfigType type) const;

  std::shared_ptr<const ConfigSchema> schema_;
  std::map<std::string, ConfigValue, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> origins_;
};

}  // namespace retort
