#include "core/config/config_value.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace retort {
namespace {

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower;
}

std::string_view strip_plus(std::string_view text) {
  return text.size() > 1 && text.front() == '+' ? text.substr(1) : text;
}

int64_t parse_int(std::string_view text) {
  const std::string_view digits = strip_plus(text);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::result_out_of_range) {
    throw ConfigValueError(fmt::format("must be an integer, got '{}', which is out of the 64-bit range", text));
  }
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    throw ConfigValueError(fmt::format("must be an integer, got '{}'", text));
  }
  return value;
}

double parse_float(std::string_view text) {
  // YAML spells the special values with a dot; from_chars spells them without.
  const std::string lower = lowercase(text);
  if (lower == ".inf" || lower == "+.inf") return INFINITY;
  if (lower == "-.inf") return -INFINITY;
  if (lower == ".nan") return NAN;
  const std::string_view digits = strip_plus(text);
  double value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    throw ConfigValueError(fmt::format("must be a number, got '{}'", text));
  }
  return value;
}

bool parse_bool(std::string_view text) {
  const std::string lower = lowercase(text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  throw ConfigValueError(fmt::format("must be a boolean (true or false), got '{}'", text));
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    default:
      return fmt::format("'{}'", node.Scalar());
  }
}

ConfigType element_type(ConfigType list) {
  switch (list) {
    case ConfigType::IntList:
      return ConfigType::Int;
    case ConfigType::FloatList:
      return ConfigType::Float;
    default:
      return ConfigType::String;
  }
}

std::string_view expectation(ConfigType type) {
  switch (type) {
    case ConfigType::Int:
      return "an integer";
    case ConfigType::Float:
      return "a number";
    case ConfigType::Bool:
      return "a boolean (true or false)";
    case ConfigType::String:
      return "a string";
    case ConfigType::IntList:
      return "a list of integers";
    case ConfigType::FloatList:
      return "a list of numbers";
    case ConfigType::StringList:
      return "a list of strings";
  }
  return "?";
}

template <typename T>
std::vector<T> parse_list(const YAML::Node& node, ConfigType list_type) {
  std::vector<T> values;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node element = node[i];
    if (!element.IsScalar()) {
      throw ConfigValueError(
          fmt::format("must be {}, got {} at index {}", expectation(list_type), describe_node(element), i));
    }
    try {
      values.push_back(std::get<T>(parse_config_scalar(element.Scalar(), element_type(list_type))));
    } catch (const ConfigValueError&) {
      throw ConfigValueError(
          fmt::format("must be {}, got '{}' at index {}", expectation(list_type), element.Scalar(), i));
    }
  }
  return values;
}

}  // namespace

std::string_view config_type_name(ConfigType type) {
  switch (type) {
    case ConfigType::Int:
      return "int";
    case ConfigType::Float:
      return "float";
    case ConfigType::Bool:
      return "bool";
    case ConfigType::String:
      return "string";
    case ConfigType::IntList:
      return "list[int]";
    case ConfigType::FloatList:
      return "list[float]";
    case ConfigType::StringList:
      return "list[string]";
  }
  return "?";
}

ConfigType config_value_type(const ConfigValue& value) {
  return static_cast<ConfigType>(value.index());
}

std::string format_config_double(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  std::string text = fmt::format("{}", value);
  // "3" would read back as the same double, but "3.0" tells a reader the key is a float.
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

std::string format_config_value(const ConfigValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) return fmt::format("{}", v);
        if constexpr (std::is_same_v<T, double>) return format_config_double(v);
        if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        if constexpr (std::is_same_v<T, std::string>) return v.empty() ? "\"\"" : v;
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) return fmt::format("[{}]", fmt::join(v, ", "));
        if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::vector<std::string> parts;
          for (double d : v) parts.push_back(format_config_double(d));
          return fmt::format("[{}]", fmt::join(parts, ", "));
        }
        if constexpr (std::is_same_v<T, std::vector<std::string>>) return fmt::format("[{}]", fmt::join(v, ", "));
      },
      value);
}

ConfigValue parse_config_scalar(std::string_view text, ConfigType type) {
  switch (type) {
    case ConfigType::Int:
      return parse_int(text);
    case ConfigType::Float:
      return parse_float(text);
    case ConfigType::Bool:
      return parse_bool(text);
    case ConfigType::String:
      return std::string(text);
    default:
      throw ConfigValueError(fmt::format("must be {}, got '{}'", expectation(type), text));
  }
}

ConfigValue parse_config_value(const YAML::Node& node, ConfigType type) {
  const bool list = type == ConfigType::IntList || type == ConfigType::FloatList || type == ConfigType::StringList;
  if (list) {
    if (!node.IsSequence())
      throw ConfigValueError(fmt::format("must be {}, got {}", expectation(type), describe_node(node)));
    switch (type) {
      case ConfigType::IntList:
        return parse_list<int64_t>(node, type);
      case ConfigType::FloatList:
        return parse_list<double>(node, type);
      default:
        return parse_list<std::string>(node, type);
    }
  }
  // An empty string is a meaningful string value ("no tokenizer file"); for other types it is a mistake.
  if (type == ConfigType::String && node.IsNull()) return std::string();
  if (!node.IsScalar())
    throw ConfigValueError(fmt::format("must be {}, got {}", expectation(type), describe_node(node)));
  return parse_config_scalar(node.Scalar(), type);
}

}  // namespace retort
