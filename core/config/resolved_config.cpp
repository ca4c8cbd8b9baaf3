#include "core/config/resolved_config.h"

#include <yaml-cpp/yaml.h>

#include "core/util/error.h"

namespace retort {
namespace {

// Keys in declaration order, grouped into nested sections at the first appearance of each section.
struct KeyTree {
  std::string name;
  const ConfigEntry* entry = nullptr;
  std::vector<KeyTree> children;

  KeyTree& child(const std::string& child_name) {
    for (KeyTree& existing : children) {
      if (existing.name == child_name) return existing;
    }
    children.push_back({child_name, nullptr, {}});
    return children.back();
  }
};

void emit_scalar(YAML::Emitter& out, const ConfigValue& value) {
  switch (config_value_type(value)) {
    case ConfigType::String:
      // Always quoted: a string such as "true", "~" or "12" must read back as that string.
      out << YAML::DoubleQuoted << std::get<std::string>(value);
      break;
    case ConfigType::Float:
      out << format_config_double(std::get<double>(value));
      break;
    default:
      out << format_config_value(value);
      break;
  }
}

void emit_value(YAML::Emitter& out, const ConfigValue& value) {
  const ConfigType type = config_value_type(value);
  if (type == ConfigType::IntList || type == ConfigType::FloatList || type == ConfigType::StringList) {
    out << YAML::Flow << YAML::BeginSeq;
    std::visit(
        [&](const auto& list) {
          using T = std::decay_t<decltype(list)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>> ||
                        std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& element : list) emit_scalar(out, ConfigValue(element));
          }
        },
        value);
    out << YAML::EndSeq;
    return;
  }
  emit_scalar(out, value);
}

}  // namespace

const ConfigValue& ResolvedConfig::get(std::string_view key) const {
  const auto it = values_.find(key);
  RETORT_CHECK(it != values_.end(), "config key '{}' is not declared in the schema", key);
  return it->second;
}

template <typename T>
const T& ResolvedConfig::typed(std::string_view key, ConfigType type) const {
  const ConfigValue& value = get(key);
  RETORT_CHECK(std::holds_alternative<T>(value), "config key '{}' is a {}, not a {}", key,
               config_type_name(config_value_type(value)), config_type_name(type));
  return std::get<T>(value);
}

int64_t ResolvedConfig::get_int(std::string_view key) const {
  return typed<int64_t>(key, ConfigType::Int);
}
double ResolvedConfig::get_double(std::string_view key) const {
  return typed<double>(key, ConfigType::Float);
}
bool ResolvedConfig::get_bool(std::string_view key) const {
  return typed<bool>(key, ConfigType::Bool);
}

const std::string& ResolvedConfig::get_string(std::string_view key) const {
  return typed<std::string>(key, ConfigType::String);
}

const std::vector<int64_t>& ResolvedConfig::get_int_list(std::string_view key) const {
  return typed<std::vector<int64_t>>(key, ConfigType::IntList);
}

const std::vector<double>& ResolvedConfig::get_double_list(std::string_view key) const {
  return typed<std::vector<double>>(key, ConfigType::FloatList);
}

const std::vector<std::string>& ResolvedConfig::get_string_list(std::string_view key) const {
  return typed<std::vector<std::string>>(key, ConfigType::StringList);
}

const std::string& ResolvedConfig::origin(std::string_view key) const {
  const auto it = origins_.find(key);
  RETORT_CHECK(it != origins_.end(), "config key '{}' is not declared in the schema", key);
  return it->second;
}

std::string ResolvedConfig::to_yaml(bool with_descriptions) const {
  KeyTree root;
  for (const ConfigEntry& entry : schema_->entries()) {
    KeyTree* node = &root;
    size_t start = 0;
    for (size_t dot = entry.key.find('.'); dot != std::string::npos; dot = entry.key.find('.', start)) {
      node = &node->child(entry.key.substr(start, dot - start));
      start = dot + 1;
    }
    node->child(entry.key.substr(start)).entry = &entry;
  }

  YAML::Emitter out;
  const auto emit_map = [&](const auto& self, const KeyTree& tree) -> void {
    out << YAML::BeginMap;
    for (const KeyTree& child : tree.children) {
      out << YAML::Key << child.name << YAML::Value;
      if (child.entry == nullptr) {
        self(self, child);
        continue;
      }
      emit_value(out, values_.at(child.entry->key));
      if (with_descriptions && !child.entry->description.empty()) out << YAML::Comment(child.entry->description);
    }
    out << YAML::EndMap;
  };
  emit_map(emit_map, root);
  RETORT_CHECK(out.good(), "emitting the resolved config failed: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace retort
