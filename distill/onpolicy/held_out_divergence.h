#pragma once
// What on-policy distillation is for, measured: on held-out prompts, the student's own continuations, and the
// reverse KL(q || p) and forward KL(p || q) between the student's q and the teacher's p at every position that
// predicts one of the student's tokens (full vocabulary, temperature 1, no T^2), averaged over those positions. The
// draws use a fixed seed, so two measurements of one student see the same noise and a change is the student's.
#include <vector>

#include "core/data/loader.h"
#include "distill/onpolicy/on_policy_options.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

struct HeldOutDivergence {
  double reverse_kl = 0;
  double forward_kl = 0;
  int64_t tokens = 0;  // generated positions scored
};

// Every rank of the models' tp group calls it with the same prompts (student and teacher split over one group).
HeldOutDivergence held_out_divergence(const GptModel& student, DType student_dtype, const GptModel& teacher,
                                      DType teacher_dtype, const std::vector<data::TokenBatch>& prompts,
                                      const OnPolicyOptions& options);

}  // namespace retort::distill
