#include "core/config/config.h"

#include <fmt/format.h>

#include <set>

#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "core/util/suggest.h"

namespace retort {
namespace {

YAML::Node parse_yaml(std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& error) {
    throw InputError(fmt::format("cannot parse config '{}': line {}, column {}: {}", source, error.mark.line + 1,
                                 error.mark.column + 1, error.msg));
  }
  if (root.IsNull()) return YAML::Node(YAML::NodeType::Map);
  RETORT_INPUT_CHECK(root.IsMap(), "config '{}' must be a mapping of keys at the top level, not a {}", source,
                     root.IsSequence() ? "list" : "single value");
  return root;
}

// Collects every problem before throwing, so one run of the program reports all of them.
class Resolver {
 public:
  explicit Resolver(const ConfigSchema& schema) : schema_(schema) {}

  void walk(const YAML::Node& map, const std::string& prefix, const std::string& source, bool from_override) {
    for (const auto& item : map) {
      const YAML::Node& key_node = item.first;
      const YAML::Node& value = item.second;
      const std::string origin = from_override ? source : fmt::format("{}:{}", source, key_node.Mark().line + 1);
      if (!key_node.IsScalar()) {
        errors_.push_back(fmt::format("config keys must be plain names ({})", origin));
        continue;
      }
      const std::string key = prefix.empty() ? key_node.Scalar() : fmt::format("{}.{}", prefix, key_node.Scalar());
      if (const ConfigEntry* entry = schema_.find(key)) {
        if (!from_override && !file_keys_.insert(key).second) {
          errors_.push_back(fmt::format("config key '{}' is set twice ({})", key, origin));
          continue;
        }
        set(*entry, value, origin);
      } else if (schema_.is_section(key)) {
        if (value.IsMap()) {
          walk(value, key, source, from_override);
        } else if (!value.IsNull()) {
          errors_.push_back(section_misuse(key, origin));
        }
      } else {
        errors_.push_back(unknown_key(key, origin));
      }
    }
  }

  void apply_override(const std::string& key, const std::string& value_text, const std::string& origin) {
    const ConfigEntry* entry = schema_.find(key);
    if (entry == nullptr && !schema_.is_section(key)) {
      errors_.push_back(unknown_key(key, origin));
      return;
    }
    YAML::Node value;
    std::string parse_error;
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& error) {
      parse_error = error.msg;
    }
    if (entry != nullptr && entry->type == ConfigType::String) {
      // Paths and free text rarely are valid YAML scalars ("a: b", "[draft]"); a string key takes them as typed.
      set(*entry, value.IsScalar() ? value : YAML::Node(value_text), origin);
      return;
    }
    if (!parse_error.empty()) {
      errors_.push_back(fmt::format("config key '{}': the value '{}' is not valid YAML: {} ({})", key, value_text,
                                    parse_error, origin));
      return;
    }
    if (entry != nullptr) {
      set(*entry, value, origin);
    } else if (value.IsMap()) {
      walk(value, key, origin, /*from_override=*/true);
    } else {
      errors_.push_back(section_misuse(key, origin));
    }
  }

  // Fills in defaults; after this, values() and origins() hold every declared key unless errors were found.
  void add_defaults() {
    for (const ConfigEntry& entry : schema_.entries()) {
      if (values_.contains(entry.key)) continue;
      if (!entry.default_value) {
        errors_.push_back(fmt::format("config key '{}' ({}) is required: set it in the config file or as {}=<value>",
                                      entry.key, entry.description, entry.key));
        continue;
      }
      const std::string problem = entry.validate(*entry.default_value);
      RETORT_CHECK(problem.empty(), "the default of config key '{}' breaks its own constraint: {}", entry.key, problem);
      values_.emplace(entry.key, *entry.default_value);
      origins_.emplace(entry.key, "default");
    }
  }

  void cross_check(const ResolvedConfig& resolved) {
    for (const ConfigCrossCheck& check : schema_.cross_checks()) {
      std::string problem = check(resolved);
      if (!problem.empty()) errors_.push_back(std::move(problem));
    }
  }

  void throw_if_errors() const {
    if (errors_.empty()) return;
    if (errors_.size() == 1) throw InputError(errors_.front());
    throw InputError(fmt::format("the config has {} problems:\n  {}", errors_.size(), fmt::join(errors_, "\n  ")));
  }

  std::map<std::string, ConfigValue, std::less<>>& values() { return values_; }
  std::map<std::string, std::string, std::less<>>& origins() { return origins_; }

 private:
  void set(const ConfigEntry& entry, const YAML::Node& node, const std::string& origin) {
    try {
      ConfigValue value = parse_config_value(node, entry.type);
      const std::string problem = entry.validate(value);
      if (!problem.empty()) {
        errors_.push_back(fmt::format("config key '{}' {} ({})", entry.key, problem, origin));
        return;
      }
      values_.insert_or_assign(entry.key, std::move(value));
      origins_.insert_or_assign(entry.key, origin);
    } catch (const ConfigValueError& error) {
      errors_.push_back(fmt::format("config key '{}' {} ({})", entry.key, error.what(), origin));
    }
  }

  std::string unknown_key(const std::string& key, const std::string& origin) const {
    return fmt::format("unknown config key '{}' ({}){}", key, origin, did_you_mean(key, schema_.keys()));
  }

  std::string section_misuse(const std::string& key, const std::string& origin) const {
    std::vector<std::string> members;
    for (const std::string& candidate : schema_.keys()) {
      if (candidate.starts_with(key + ".")) members.push_back(candidate);
    }
    return fmt::format("config key '{}' is a section, not a value: set its keys ({}) instead ({})", key,
                       fmt::join(members, ", "), origin);
  }

  const ConfigSchema& schema_;
  std::map<std::string, ConfigValue, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> origins_;
  std::set<std::string> file_keys_;
  std::vector<std::string> errors_;
};

}  // namespace

Config Config::load(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return from_string(text, path.string());
}

Config Config::from_string(std::string_view yaml, std::string source) {
  Config config;
  config.root_ = parse_yaml(yaml, source);
  config.source_ = std::move(source);
  return config;
}

void Config::apply_overrides(const std::vector<std::string>& overrides) {
  for (const std::string& text : overrides) apply_override(text);
}

void Config::apply_override(std::string_view override_text) {
  const size_t equals = override_text.find('=');
  RETORT_INPUT_CHECK(equals != std::string_view::npos,
                     "config override '{}' has no '=': write it as key=value, e.g. model.n_layer=4", override_text);
  std::string key(override_text.substr(0, equals));
  RETORT_INPUT_CHECK(!key.empty(), "config override '{}' has no key before '='", override_text);
  RETORT_INPUT_CHECK(key.front() != '+' && key.front() != '~',
                     "config override '{}': Hydra's '+' and '~' prefixes are not supported; every key already exists, "
                     "so write key=value",
                     override_text);
  overrides_.push_back({std::move(key), std::string(override_text.substr(equals + 1)), std::string(override_text)});
}

ResolvedConfig Config::resolve(const ConfigSchema& schema) const {
  Resolver resolver(schema);
  if (root_.IsDefined() && root_.IsMap()) resolver.walk(root_, "", source_, /*from_override=*/false);
  for (const Override& item : overrides_) {
    resolver.apply_override(item.key, item.value_text, fmt::format("override '{}'", item.original));
  }
  resolver.add_defaults();
  resolver.throw_if_errors();
  ResolvedConfig resolved(std::make_shared<const ConfigSchema>(schema), std::move(resolver.values()),
                          std::move(resolver.origins()));
  resolver.cross_check(resolved);
  resolver.throw_if_errors();
  return resolved;
}

}  // namespace retort
