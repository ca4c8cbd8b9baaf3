#include "core/config/config_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/util/error.h"

namespace retort {
namespace {

bool valid_component(std::string_view part) {
  return !part.empty() &&
         std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

bool valid_key(std::string_view key) {
  size_t start = 0;
  for (;;) {
    const size_t dot = key.find('.', start);
    if (!valid_component(key.substr(start, dot == std::string_view::npos ? dot : dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string format_bound(double bound) {
  // Integral bounds print without a fraction, so an int key's range reads "[1, 1024]".
  if (std::abs(bound) < 1e15 && bound == static_cast<double>(static_cast<int64_t>(bound))) {
    return fmt::format("{}", static_cast<int64_t>(bound));
  }
  return fmt::format("{}", bound);
}

std::vector<double> numbers_of(const ConfigValue& value) {
  if (const auto* v = std::get_if<int64_t>(&value)) return {static_cast<double>(*v)};
  if (const auto* v = std::get_if<double>(&value)) return {*v};
  if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) return {v->begin(), v->end()};
  if (const auto* v = std::get_if<std::vector<double>>(&value)) return *v;
  return {};
}

std::vector<std::string> strings_of(const ConfigValue& value) {
  if (const auto* v = std::get_if<std::string>(&value)) return {*v};
  if (const auto* v = std::get_if<std::vector<std::string>>(&value)) return *v;
  return {};
}

}  // namespace

std::string ConfigEntry::constraint_text() const {
  std::vector<std::string> parts;
  if (min && max && !min_exclusive && !max_exclusive) {
    parts.push_back(fmt::format("in [{}, {}]", format_bound(*min), format_bound(*max)));
  } else {
    if (min) parts.push_back(fmt::format("{} {}", min_exclusive ? ">" : ">=", format_bound(*min)));
    if (max) parts.push_back(fmt::format("{} {}", max_exclusive ? "<" : "<=", format_bound(*max)));
  }
  if (!choices.empty()) parts.push_back(fmt::format("one of: {}", fmt::join(choices, ", ")));
  for (const auto& [check, description] : checks) {
    if (!description.empty()) parts.push_back(description);
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string ConfigEntry::validate(const ConfigValue& value) const {
  for (const double number : numbers_of(value)) {
    const bool too_small = min && (min_exclusive ? !(number > *min) : !(number >= *min));
    const bool too_large = max && (max_exclusive ? !(number < *max) : !(number <= *max));
    if (too_small || too_large) {
      std::string shown =
          config_value_type(value) == ConfigType::Float || config_value_type(value) == ConfigType::FloatList
              ? format_config_double(number)
              : format_bound(number);
      return fmt::format("must be {}, got {}", constraint_text(), shown);
    }
  }
  if (!choices.empty()) {
    for (const std::string& text : strings_of(value)) {
      if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
        return fmt::format("must be one of: {}; got '{}'", fmt::join(choices, ", "), text);
      }
    }
  }
  for (const auto& [check, description] : checks) {
    std::string problem = check(value);
    if (!problem.empty()) return problem;
  }
  return {};
}

ConfigEntryBuilder& ConfigEntryBuilder::range(double lo, double hi) {
  RETORT_CHECK(lo <= hi, "config key '{}': empty range [{}, {}]", entry_.key, lo, hi);
  min(lo);
  return max(hi);
}

ConfigEntryBuilder& ConfigEntryBuilder::min(double lo) {
  entry_.min = lo;
  entry_.min_exclusive = false;
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::max(double hi) {
  entry_.max = hi;
  entry_.max_exclusive = false;
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::greater_than(double lo) {
  entry_.min = lo;
  entry_.min_exclusive = true;
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::less_than(double hi) {
  entry_.max = hi;
  entry_.max_exclusive = true;
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::choices(std::vector<std::string> allowed) {
  RETORT_CHECK(entry_.type == ConfigType::String || entry_.type == ConfigType::StringList,
               "config key '{}': choices apply to string keys, not {}", entry_.key, config_type_name(entry_.type));
  entry_.choices = std::move(allowed);
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::check(ConfigValueCheck check, std::string description) {
  entry_.checks.emplace_back(std::move(check), std::move(description));
  return *this;
}

ConfigEntryBuilder& ConfigEntryBuilder::required() {
  entry_.default_value.reset();
  return *this;
}

ConfigEntryBuilder ConfigSchema::add(std::string key, ConfigType type, std::optional<ConfigValue> default_value,
                                     std::string description) {
  RETORT_CHECK(valid_key(key), "config key '{}' is malformed: use dot-separated names of letters, digits, _ and -",
               key);
  RETORT_CHECK(!index_.contains(key), "config key '{}' is declared twice", key);
  RETORT_CHECK(!is_section(key), "config key '{}' is already a section of other keys", key);
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    RETORT_CHECK(!index_.contains(key.substr(0, dot)), "config key '{}' lies under '{}', which is itself a key", key,
                 key.substr(0, dot));
  }
  RETORT_CHECK(!default_value || config_value_type(*default_value) == type,
               "config key '{}': the default is a {}, the key a {}", key,
               config_type_name(config_value_type(*default_value)), config_type_name(type));
  index_.emplace(key, entries_.size());
  ConfigEntry& entry = entries_.emplace_back();
  entry.key = std::move(key);
  entry.type = type;
  entry.default_value = std::move(default_value);
  entry.description = std::move(description);
  return ConfigEntryBuilder(entries_.back());
}

ConfigEntryBuilder ConfigSchema::add_int(std::string key, int64_t default_value, std::string description) {
  return add(std::move(key), ConfigType::Int, ConfigValue(default_value), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_float(std::string key, double default_value, std::string description) {
  return add(std::move(key), ConfigType::Float, ConfigValue(default_value), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_bool(std::string key, bool default_value, std::string description) {
  return add(std::move(key), ConfigType::Bool, ConfigValue(default_value), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_string(std::string key, std::string default_value, std::string description) {
  return add(std::move(key), ConfigType::String, ConfigValue(std::move(default_value)), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_int_list(std::string key, std::vector<int64_t> default_value,
                                              std::string description) {
  return add(std::move(key), ConfigType::IntList, ConfigValue(std::move(default_value)), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_float_list(std::string key, std::vector<double> default_value,
                                                std::string description) {
  return add(std::move(key), ConfigType::FloatList, ConfigValue(std::move(default_value)), std::move(description));
}

ConfigEntryBuilder ConfigSchema::add_string_list(std::string key, std::vector<std::string> default_value,
                                                 std::string description) {
  return add(std::move(key), ConfigType::StringList, ConfigValue(std::move(default_value)), std::move(description));
}

void ConfigSchema::add_check(ConfigCrossCheck check) {
  cross_checks_.push_back(std::move(check));
}

const ConfigEntry* ConfigSchema::find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

bool ConfigSchema::is_section(std::string_view prefix) const {
  const std::string section = fmt::format("{}.", prefix);
  const auto it = index_.lower_bound(section);
  return it != index_.end() && it->first.starts_with(section);
}

std::vector<std::string> ConfigSchema::keys() const {
  std::vector<std::string> keys;
  for (const ConfigEntry& entry : entries_) keys.push_back(entry.key);
  return keys;
}

std::string ConfigSchema::describe() const {
  size_t key_width = 3, type_width = 4, default_width = 7;
  std::vector<std::string> defaults;
  for (const ConfigEntry& entry : entries_) {
    defaults.push_back(entry.default_value ? format_config_value(*entry.default_value) : "(required)");
    key_width = std::max(key_width, entry.key.size());
    type_width = std::max(type_width, config_type_name(entry.type).size());
    default_width = std::max(default_width, std::min<size_t>(defaults.back().size(), 24));
  }
  std::string text = fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", "key", key_width, "type", type_width, "default",
                                 default_width, "description");
  for (size_t i = 0; i < entries_.size(); ++i) {
    const ConfigEntry& entry = entries_[i];
    std::string description = entry.description;
    const std::string constraints = entry.constraint_text();
    if (!constraints.empty()) description += fmt::format(" ({})", constraints);
    text += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", entry.key, key_width, config_type_name(entry.type), type_width,
                        defaults[i], default_width, description);
  }
  return text;
}

}  // namespace retort
