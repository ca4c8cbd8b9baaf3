#include "distill/compare/compare_methods.h"

#include <algorithm>

namespace retort::distill {

const std::vector<CompareMethod>& compare_methods() {
  static const std::vector<CompareMethod> methods{
      {"label_only", "label-only", {}, /*uses_teacher_signal=*/false, /*writes_cache=*/false},
      {"topk_renormalized",
       "top-k renormalised",
       {"distill.mode=cache", "distill.cache_kind=topk", "distill.loss=forward_kl_renormalized"},
       true,
       true},
      {"topk_rest",
       "top-k + rest bucket",
       {"distill.mode=cache", "distill.cache_kind=topk", "distill.loss=forward_kl_rest"},
       true,
       true},
      {"sampled",
       "sampled KD",
       {"distill.mode=cache", "distill.cache_kind=sampled", "distill.loss=forward_kl_rest"},
       true,
       true},
      {"online", "online full-distribution KD", {"distill.mode=online"}, true, false},
      // The teacher scores the student's own continuations in every step, so there is no cache to read: the online
      // mode's teacher serves it. A build without distill.on_policy_ratio refuses the key, and the row says so.
      {"on_policy", "on-policy", {"distill.mode=online", "distill.on_policy_ratio=1"}, true, false},
  };
  return methods;
}

std::vector<CompareMethod> selected_methods(const ResolvedConfig& config) {
  const std::vector<std::string>& names = config.get_string_list("distill.compare.methods");
  std::vector<CompareMethod> selected;
  for (const CompareMethod& method : compare_methods())
    if (std::find(names.begin(), names.end(), method.name) != names.end()) selected.push_back(method);
  return selected;
}

}  // namespace retort::distill
