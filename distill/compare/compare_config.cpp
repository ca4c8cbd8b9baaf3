#include "distill/compare/compare_config.h"

#include <yaml-cpp/yaml.h>

#include "core/config/config.h"
#include "distill/compare/compare_methods.h"
#include "distill/distill_config.h"

namespace retort::distill {

ConfigSchema compare_schema() {
  ConfigSchema s = distill_schema(kDistillCompareRunDir);
  std::vector<std::string> names;
  for (const CompareMethod& method : compare_methods()) names.push_back(method.name);
  s.add_string_list("distill.compare.methods", names,
                    "`distill compare`: the methods to run, each as its own student of the same teacher, data, seed "
                    "and step budget (label_only, topk_renormalized, topk_rest, sampled, online, on_policy); the "
                    "table keeps this order")
      .choices(names);
  s.add_check([](const ResolvedConfig& c) -> std::string {
    if (c.get_string_list("distill.compare.methods").empty())
      return "distill.compare.methods is empty: name at least one method";
    if (cross_tokenizer(c))
      return "distill compare runs students of the teacher's tokenizer: set distill.xtoken.enabled=false (the "
             "cross-tokenizer objective has `distill run` of its own)";
    if (!c.get_string("distill.cache_dir").empty())
      return "distill compare writes each method's cache in the method's own folder of run.dir: leave "
             "distill.cache_dir empty";
    return {};
  });
  return s;
}

ResolvedConfig comparison_base_config(const ResolvedConfig& config) {
  YAML::Node root = YAML::Load(config.to_yaml());
  if (root["distill"]) root["distill"].remove("compare");
  YAML::Emitter out;
  out << root;
  return Config::from_string(out.c_str(), "<distill compare>").resolve(distill_schema(kDistillCompareRunDir));
}

}  // namespace retort::distill
