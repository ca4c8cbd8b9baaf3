#include "distill/onpolicy/on_policy_options.h"

#include <algorithm>
#include <cmath>

namespace retort::distill {

OnPolicyOptions on_policy_options_from(const ResolvedConfig& c) {
  OnPolicyOptions o;
  o.ratio = c.get_double("distill.on_policy_ratio");
  o.sample_temperature = c.get_double("distill.on_policy_temperature");
  o.top_p = c.get_double("distill.on_policy_top_p");
  const OnPolicyLengths lengths = on_policy_lengths_from(c);
  o.prompt_tokens = lengths.prompt_tokens;
  o.new_tokens = lengths.new_tokens;
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

OnPolicyLengths on_policy_lengths_from(const ResolvedConfig& c) {
  // 32 + 32 suits the toy windows (128); shorter windows get half of theirs, so the key may be left alone anywhere.
  constexpr int64_t kDefaultLength = 32;
  const int64_t block = c.get_int("model.block_size");
  const int64_t window = std::min(c.get_int("train.seq_len"), block);
  OnPolicyLengths l;
  l.prompt_tokens = c.get_int("distill.on_policy_prompt_tokens");
  if (l.prompt_tokens == 0) l.prompt_tokens = std::min(kDefaultLength, std::max<int64_t>(1, window / 2));
  l.new_tokens = c.get_int("distill.on_policy_new_tokens");
  if (l.new_tokens == 0) l.new_tokens = std::min(kDefaultLength, block - l.prompt_tokens);
  return l;
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
