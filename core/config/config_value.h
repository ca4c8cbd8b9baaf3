#pragma once
// The value types a config key can have, and the strict conversion of YAML nodes into them: "abc" is not an
// integer, 4.5 is not an integer either, and "yes" is a boolean only for a boolean key.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace YAML {
class Node;
}

namespace retort {

enum class ConfigType { Int, Float, Bool, String, IntList, FloatList, StringList };

// Alternatives in ConfigType order, so value.index() == static_cast<size_t>(type).
using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
                                 std::vector<std::string>>;

std::string_view config_type_name(ConfigType type);  // "int", "float", ..., "list[string]"
ConfigType config_value_type(const ConfigValue& value);

// For messages and listings: 12, 0.0003, true, adamw, "" (an empty string), [1, 2].
std::string format_config_value(const ConfigValue& value);
// A double as YAML that reads back to the same bits: shortest round-trip digits, ".inf", ".nan".
std::string format_config_double(double value);

// Thrown by parse_config_value with the predicate of a message: "must be an integer, got 'abc'".
class ConfigValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

ConfigValue parse_config_value(const YAML::Node& node, ConfigType type);
// The same for one scalar's text, as a plain (unquoted) YAML scalar would be read.
ConfigValue parse_config_scalar(std::string_view text, ConfigType type);

}  // namespace retort
