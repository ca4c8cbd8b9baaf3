#pragma once
// The on-policy loss of one rollout batch: at every position that predicts one of the student's own tokens, the
// divergence of OnPolicyOptions between the student's and the teacher's full next-token distributions (both
// vocab-split over the tp group), averaged over those positions. The per-row divergences are the vocab-parallel
// distribution losses of losses/distribution_loss.h, so each rank's gradient is its exact local slice with no
// collective in the backward.
#include "core/tensor/tensor.h"
#include "distill/onpolicy/on_policy_options.h"
#include "parallel/comm/communicator.h"

namespace retort::distill {

// student [B, T, V_local] (on the tape), teacher of the same shape (a constant), targets i32 [B, T]: ignore_index
// where the position is not scored. Returns the 0-dim loss on the tape (T^2 x the mean divergence).
Tensor on_policy_loss(const Tensor& student, const Tensor& teacher, const Tensor& targets,
                      const OnPolicyOptions& options, std::shared_ptr<Communicator> tp_group);

}  // namespace retort::distill
