#include "distill/onpolicy/student_rollout.h"

#include "core/util/error.h"
#include "parallel/generate/generator.h"

namespace retort::distill {

StudentRollout roll_out_student(const GptModel& student, const data::TokenBatch& data, const RolloutOptions& options) {
  const int64_t prompt = options.prompt_tokens, fresh = options.new_tokens;
  RETORT_INPUT_CHECK(prompt >= 1 && prompt <= data.seq,
                     "on-policy prompts of {} tokens do not fit the batch's windows of {} tokens: set "
                     "distill.on_policy_prompt_tokens between 1 and train.seq_len",
                     prompt, data.seq);
  RETORT_INPUT_CHECK(fresh >= 1 && prompt + fresh <= student.config().block_size,
                     "on-policy prompts of {} tokens plus {} new ones exceed the student's context of {} tokens: "
                     "shorten distill.on_policy_prompt_tokens + distill.on_policy_new_tokens to model.block_size",
                     prompt, fresh, student.config().block_size);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(data.batch));
  for (int64_t b = 0; b < data.batch; ++b) {
    const auto first = data.inputs.begin() + b * data.seq;
    prompts[static_cast<size_t>(b)].assign(first, first + prompt);
  }
  generate::GenerationOptions generation;
  generation.max_new_tokens = fresh;
  generation.sampling = options.sampling;
  generation.compute_dtype = options.compute_dtype;
  // The window's place in the data names the row's draws: the same window gets the same noise on every rank.
  for (int64_t b = 0; b < data.batch; ++b)
    generation.sequence_ids.push_back(b < static_cast<int64_t>(data.window_starts.size())
                                          ? static_cast<uint64_t>(data.window_starts[b])
                                          : static_cast<uint64_t>(b));
  const std::vector<generate::GeneratedSequence> out = generate::generate_tokens(student, prompts, generation);

  StudentRollout rollout;
  rollout.batch = data.batch;
  rollout.length = prompt + fresh;
  rollout.tokens.reserve(static_cast<size_t>(data.batch * rollout.length));
  rollout.generated.reserve(rollout.tokens.capacity());
  for (int64_t b = 0; b < data.batch; ++b) {
    const auto& continuation = out[static_cast<size_t>(b)].tokens;
    // No stop condition and a context that holds prompt + continuation: every row runs to its full length.
    RETORT_CHECK(static_cast<int64_t>(continuation.size()) == fresh,
                 "the generator returned {} tokens for row {}, not the {} asked for", continuation.size(), b, fresh);
    const auto& p = prompts[static_cast<size_t>(b)];
    rollout.tokens.insert(rollout.tokens.end(), p.begin(), p.end());
    rollout.tokens.insert(rollout.tokens.end(), continuation.begin(), continuation.end());
    rollout.generated.insert(rollout.generated.end(), static_cast<size_t>(prompt), uint8_t{0});
    rollout.generated.insert(rollout.generated.end(), static_cast<size_t>(fresh), uint8_t{1});
  }
  return rollout;
}

data::TokenBatch rollout_training_batch(const StudentRollout& rollout, const data::TokenBatch& data, int ignore_index) {
  data::TokenBatch batch;
  batch.batch = rollout.batch;
  batch.seq = rollout.length - 1;
  batch.window_starts = data.window_starts;
  batch.inputs.reserve(static_cast<size_t>(batch.batch * batch.seq));
  batch.targets.reserve(batch.inputs.capacity());
  for (int64_t b = 0; b < rollout.batch; ++b) {
    const int64_t row = b * rollout.length;
    for (int64_t t = 0; t < batch.seq; ++t) {
      batch.inputs.push_back(rollout.tokens[static_cast<size_t>(row + t)]);
      const bool own = rollout.generated[static_cast<size_t>(row + t + 1)] != 0;
      batch.targets.push_back(own ? rollout.tokens[static_cast<size_t>(row + t + 1)] : ignore_index);
    }
  }
  return batch;
}

}  // namespace retort::distill
