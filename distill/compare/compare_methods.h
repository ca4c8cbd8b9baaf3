#pragma once
// The rows of `retort distill compare`: each method is a name, a title and the config overrides that select it on
// top of the comparison's config, so a new method is one more entry here. Every method trains the same student
// (shape, data, seed, steps, optimizer) from the same teacher; only what the student learns from differs.
#include <string>
#include <vector>

#include "core/config/resolved_config.h"

namespace retort::distill {

struct CompareMethod {
  std::string name;                    // the key's value in distill.compare.methods, and the method's folder in run.dir
  std::string title;                   // the table's row
  std::vector<std::string> overrides;  // the keys that select it
  bool uses_teacher_signal = true;     // false: the label-only student (`retort train`'s objective)
  bool writes_cache = false;           // a teacher cache is written for it (cache mode)
};

// Every method, in the table's order: label-only, top-k renormalised, top-k with rest bucket, sampled KD, online
// full-distribution KD, on-policy.
const std::vector<CompareMethod>& compare_methods();

// The methods distill.compare.methods picks, in the table's order (the schema has already refused unknown names).
std::vector<CompareMethod> selected_methods(const ResolvedConfig& config);

}  // namespace retort::distill
