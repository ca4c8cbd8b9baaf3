#include "distill/onpolicy/on_policy_options.h"

#include <cmath>

namespace retort::distill {

OnPolicyOptions on_policy_options_from(const ResolvedConfig& c) {
  OnPolicyOptions o;
  o.ratio = c.get_double("distill.on_policy_ratio");
  o.sample_temperature = c.get_double("distill.on_policy_temperature");
  o.top_p = c.get_double("distill.on_policy_top_p");
  o.prompt_tokens = c.get_int("distill.on_policy_prompt_tokens");
  o.new_tokens = c.get_int("distill.on_policy_new_tokens");
  const std::string divergence = c.get_string("distill.on_policy_divergence");
  o.divergence = divergence == "forward" ? OnPolicyDivergence::Forward
                 : divergence == "mixed" ? OnPolicyDivergence::Mixed
                                         : OnPolicyDivergence::Reverse;
  o.mix = c.get_double("distill.on_policy_mix");
  o.kd_temperature = c.get_double("distill.temperature");
  o.ignore_index = static_cast<int>(c.get_int("loss.ignore_index"));
  o.seed = static_cast<uint64_t>(c.get_int("run.seed"));
  return o;
}

std::string divergence_name(OnPolicyDivergence divergence) {
  switch (divergence) {
    case OnPolicyDivergence::Forward:
      return "forward_kl";
    case OnPolicyDivergence::Mixed:
      return "mixed";
    case OnPolicyDivergence::Reverse:
      break;
  }
  return "reverse_kl";
}

bool is_on_policy_step(int64_t step, double ratio) {
  if (ratio <= 0) return false;
  if (ratio >= 1) return true;
  const double s = static_cast<double>(step);
  return std::floor((s + 1) * ratio) > std::floor(s * ratio);
}

}  // namespace retort::distill
