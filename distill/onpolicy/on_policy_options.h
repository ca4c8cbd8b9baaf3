#pragma once
// The settings of on-policy distillation (the distill.on_policy_* keys): how the student's continuations are drawn,
// which divergence it minimises on them, and how often a step is on-policy.
#include <cstdint>
#include <string>

#include "core/config/resolved_config.h"

namespace retort::distill {

// What the student minimises at each of its generated positions, over the full vocabulary:
//   Reverse  KL(q || p) (the student's distribution q against the teacher's p; mode-seeking, the on-policy default
//            of Agarwal et al. 2024 and Gu et al. 2024)
//   Forward  KL(p || q)
//   Mixed    mix x forward + (1 - mix) x reverse (the convention of distill.loss=mixed)
enum class OnPolicyDivergence { Reverse, Forward, Mixed };

struct OnPolicyOptions {
  double ratio = 0;               // share of on-policy steps, [0, 1]
  double sample_temperature = 1;  // of the student's continuations; 0: greedy
  double top_p = 1;               // nucleus of the continuations; 1: off
  int64_t prompt_tokens = 32;     // the prompt: the first tokens of each batch row's window
  int64_t new_tokens = 32;        // the continuation's length
  OnPolicyDivergence divergence = OnPolicyDivergence::Reverse;
  double mix = 0.5;           // Mixed: the weight of the forward KL
  double kd_temperature = 1;  // the divergence's softmax temperature (distill.temperature), loss x T^2
  int ignore_index = -100;    // marks the positions that are not the student's own tokens
  uint64_t seed = 0;          // of the continuations' draws (run.seed)
};

OnPolicyOptions on_policy_options_from(const ResolvedConfig& config);

// distill.on_policy_prompt_tokens and distill.on_policy_new_tokens, a 0 replaced by its default for the run's
// windows: the prompt min(32, half of the shorter of train.seq_len and model.block_size), the continuation
// min(32, model.block_size - prompt). A value given is kept as it is (the config's check says when it does not fit).
struct OnPolicyLengths {
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 0;
};
OnPolicyLengths on_policy_lengths_from(const ResolvedConfig& config);

// "reverse_kl", "forward_kl", "mixed": the name in objective.json and metrics.jsonl.
std::string divergence_name(OnPolicyDivergence divergence);

// Whether optimizer step `step` (0-based) is on-policy: ratio 0 never, 1 always; between, the steps where
// floor((step + 1) x ratio) grows, so the on-policy steps are spread evenly (0.5: every second one) and the
// choice depends on the step alone (a resumed run makes the same choices).
bool is_on_policy_step(int64_t step, double ratio);

}  // namespace retort::distill
