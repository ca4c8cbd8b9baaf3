#pragma once
// The student's own continuations of prompts from the data, the batch on-policy distillation trains on: each batch
// row's first prompt_tokens tokens are a prompt, the student (through the KV-cache generator of parallel/generate/,
// no gradient) samples new_tokens after it, and the whole sequence becomes a training batch whose targets are the
// student's tokens at the positions that predict them and ignore_index at the prompt's.
#include <cstdint>
#include <vector>

#include "core/data/loader.h"
#include "parallel/generate/vocab_sampler.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill {

struct RolloutOptions {
  int64_t prompt_tokens = 32;
  int64_t new_tokens = 32;
  generate::SamplingOptions sampling;  // temperature, top-p and the seed of the draws
  DType compute_dtype = DType::F32;
};

struct StudentRollout {
  int64_t batch = 0;
  int64_t length = 0;              // prompt_tokens + new_tokens
  std::vector<int32_t> tokens;     // [batch, length]: the prompt, then the student's continuation
  std::vector<uint8_t> generated;  // [batch, length]: 1 where the token is the student's, 0 in the prompt
};

// Prompts from `data`'s inputs (every rank of the student's tp group passes the same batch and gets the same
// tokens). A row's draws are keyed by its window's stream position and the sampling seed, so they do not depend on
// the other rows, the tp size or the device. InputError when the prompt is longer than the batch's windows or
// prompt + continuation exceed the model's context.
StudentRollout roll_out_student(const GptModel& student, const data::TokenBatch& data, const RolloutOptions& options);

// The rollout as a training batch of length - 1 positions: inputs tokens[:, :-1]; targets tokens[:, 1:] where that
// token is the student's, ignore_index elsewhere. window_starts are kept from `data` (on-policy reads no cache).
data::TokenBatch rollout_training_batch(const StudentRollout& rollout, const data::TokenBatch& data, int ignore_index);

}  // namespace retort::distill
