#pragma once
// What an application accepts in its config: every key (dotted, any depth), its type, default, a one-line
// description and its constraints. The schema is the single source for validation, --help-config and the
// resolved dump, so a key cannot be accepted without also being documented.
//
//   ConfigSchema schema;
//   schema.add_int("model.n_layer", 12, "transformer blocks").range(1, 1024);
//   schema.add_float("optim.lr", 3e-4, "peak learning rate").greater_than(0);
//   schema.add_string("optim.name", "adamw", "optimizer").choices({"adamw", "rekls"});
//   schema.add_string("data.train", "", "training shard pattern").required();
//   schema.add_check([](const ResolvedConfig& c) { return c.get_int("model.n_embd") % c.get_int("model.n_head")
//       ? std::string("model.n_embd must be a multiple of model.n_head") : std::string(); });
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config_value.h"

namespace retort {

class ResolvedConfig;

// Returns "" when the value is acceptable, else the reason ("must be a power of two").
using ConfigValueCheck = std::function<std::string(const ConfigValue&)>;
// Checks that involve several keys; "" when fine, else a message that names the keys.
using ConfigCrossCheck = std::function<std::string(const ResolvedConfig&)>;

struct ConfigEntry {
  std::string key;
  ConfigType type = ConfigType::Int;
  std::optional<ConfigValue> default_value;  // none: the key is required
  std::string description;
  // Numeric bounds, applied to every element of a numeric list.
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices;                              // strings and string lists only; empty: any
  std::vector<std::pair<ConfigValueCheck, std::string>> checks;  // the check and its description

  // "" when `value` is acceptable, else the predicate of a message ("must be in [1, 1024], got 0").
  std::string validate(const ConfigValue& value) const;
  // "in [1, 1024]", "> 0", "one of: adamw, rekls", ... joined by "; ".
  std::string constraint_text() const;
};

// Returned by ConfigSchema::add_*: chains constraints onto the entry just declared.
class ConfigEntryBuilder {
 public:
  explicit ConfigEntryBuilder(ConfigEntry& entry) : entry_(entry) {}
  ConfigEntryBuilder& range(double lo, double hi);  // inclusive
  ConfigEntryBuilder& min(double lo);               // value >= lo
  ConfigEntryBuilder& max(double hi);               // value <= hi
  ConfigEntryBuilder& greater_than(double lo);      // value > lo
  ConfigEntryBuilder& less_than(double hi);         // value < hi
  ConfigEntryBuilder& choices(std::vector<std::string> allowed);
  ConfigEntryBuilder& check(ConfigValueCheck check, std::string description = {});
  ConfigEntryBuilder& required();  // no default: the config must set it

 private:
  ConfigEntry& entry_;
};

class ConfigSchema {
 public:
  ConfigEntryBuilder add_int(std::string key, int64_t default_value, std::string description);
  ConfigEntryBuilder add_float(std::string key, double default_value, std::string description);
  ConfigEntryBuilder add_bool(std::string key, bool default_value, std::string description);
  ConfigEntryBuilder add_string(std::string key, std::string default_value, std::string description);
  ConfigEntryBuilder add_int_list(std::string key, std::vector<int64_t> default_value, std::string description);
  ConfigEntryBuilder add_float_list(std::string key, std::vector<double> default_value, std::string description);
  ConfigEntryBuilder add_string_list(std::string key, std::vector<std::string> default_value, std::string description);
  ConfigEntryBuilder add(std::string key, ConfigType type, std::optional<ConfigValue> default_value,
                         std::string description);

  void add_check(ConfigCrossCheck check);

  const ConfigEntry* find(std::string_view key) const;  // null when not declared
  // True when `prefix` names a section: some key starts with "prefix.".
  bool is_section(std::string_view prefix) const;
  const std::deque<ConfigEntry>& entries() const { return entries_; }  // in declaration order
  std::vector<std::string> keys() const;
  const std::vector<ConfigCrossCheck>& cross_checks() const { return cross_checks_; }

  // Every key with type, default, constraints and description: the text of `--help-config`.
  std::string describe() const;

 private:
  std::deque<ConfigEntry> entries_;  // a deque keeps builder references valid as entries are added
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<ConfigCrossCheck> cross_checks_;
};

}  // namespace retort
