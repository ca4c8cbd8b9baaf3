// The student's rollouts: greedy continuations equal a step-by-step argmax of the model's full forward (dense and at
// tp 2 and 4, every rank alike); prompts, the generated-position mask and the training batch made of them; sampled
// rollouts that depend on the seed and on a row's window, not on the batch; and the errors.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "distill/onpolicy/student_rollout.h"
#include "parallel/comm/thread_ranks.h"
#include "tests/distill/onpolicy/on_policy_test_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

using namespace on_policy_testing;

constexpr int64_t kPrompt = 5, kNew = 6, kSeq = 8, kRows = 3;

// Weights large enough that a greedy continuation follows its prompt (at the shared init_std a random model's
// argmax is one token whatever the context).
GptConfig rollout_config() {
  GptConfig c = tiny_config();
  c.init_std = 1.0;
  return c;
}

// The greedy continuation by the definition: the full forward over the sequence so far, the argmax of the last
// position (the smaller id among ties), appended, kNew times.
std::vector<int32_t> argmax_continuation(const GptModel& dense, std::vector<int32_t> sequence) {
  NoGradGuard no_grad;
  for (int64_t i = 0; i < kNew; ++i) {
    const int64_t n = static_cast<int64_t>(sequence.size());
    const std::vector<double> logits = dense.forward(Tensor::from_ints(sequence, {1, n})).to_doubles();
    const auto last = logits.begin() + (n - 1) * kVocab;
    sequence.push_back(static_cast<int32_t>(std::max_element(last, last + kVocab) - last));
  }
  return sequence;
}

RolloutOptions greedy_options() {
  RolloutOptions o;
  o.prompt_tokens = kPrompt;
  o.new_tokens = kNew;
  o.sampling.temperature = 0;
  return o;
}

TEST(StudentRollout, GreedyContinuationsAreTheStepByStepArgmax) {
  GptModel dense(rollout_config());
  dense.initialize(11);
  const data::TokenBatch data = random_batch(kRows, kSeq, 5);
  std::vector<std::vector<int32_t>> expected;
  for (int64_t b = 0; b < kRows; ++b)
    expected.push_back(argmax_continuation(
        dense, std::vector<int32_t>(data.inputs.begin() + b * kSeq, data.inputs.begin() + b * kSeq + kPrompt)));

  for (int tp : {1, 2, 4}) {
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      GptModel student(rollout_config(), comm);
      student.initialize(11);
      const StudentRollout rollout = roll_out_student(student, data, greedy_options());
      ASSERT_EQ(rollout.batch, kRows);
      ASSERT_EQ(rollout.length, kPrompt + kNew);
      for (int64_t b = 0; b < kRows; ++b) {
        const std::vector<int32_t> row(rollout.tokens.begin() + b * rollout.length,
                                       rollout.tokens.begin() + (b + 1) * rollout.length);
        EXPECT_EQ(row, expected[static_cast<size_t>(b)]) << "tp " << tp << " row " << b;
        for (int64_t t = 0; t < rollout.length; ++t)
          EXPECT_EQ(rollout.generated[static_cast<size_t>(b * rollout.length + t)], t >= kPrompt ? 1 : 0)
              << "row " << b << " position " << t;
      }
    });
  }
  // A greedy continuation that never repeats the prompt's next token would say nothing of the prompt: the
  // continuations above must differ between rows.
  EXPECT_NE(std::vector<int32_t>(expected[0].begin() + kPrompt, expected[0].end()),
            std::vector<int32_t>(expected[1].begin() + kPrompt, expected[1].end()));
}

TEST(StudentRollout, TheTrainingBatchScoresOnlyTheStudentsTokens) {
  GptModel student(tiny_config());
  student.initialize(11);
  const data::TokenBatch data = random_batch(kRows, kSeq, 5);
  const StudentRollout rollout = roll_out_student(student, data, greedy_options());
  const data::TokenBatch batch = rollout_training_batch(rollout, data, -100);
  ASSERT_EQ(batch.batch, kRows);
  ASSERT_EQ(batch.seq, kPrompt + kNew - 1);
  EXPECT_EQ(batch.window_starts, data.window_starts);
  for (int64_t b = 0; b < kRows; ++b) {
    for (int64_t t = 0; t < batch.seq; ++t) {
      const size_t i = static_cast<size_t>(b * batch.seq + t);
      // The prompt is the data's window start; then the rollout's tokens.
      EXPECT_EQ(batch.inputs[i], t < kPrompt ? data.inputs[static_cast<size_t>(b * kSeq + t)]
                                             : rollout.tokens[static_cast<size_t>(b * rollout.length + t)]);
      // Position t predicts token t + 1: scored from the prompt's last position on (kPrompt - 1), never before.
      EXPECT_EQ(batch.targets[i],
                t >= kPrompt - 1 ? rollout.tokens[static_cast<size_t>(b * rollout.length + t + 1)] : -100)
          << "row " << b << " position " << t;
    }
  }
}

TEST(StudentRollout, SampledRowsDependOnTheSeedAndTheirWindowNotOnTheBatch) {
  GptModel student(tiny_config());
  student.initialize(11);
  const data::TokenBatch data = random_batch(kRows, kSeq, 5);
  RolloutOptions o = greedy_options();
  o.sampling.temperature = 1.0;
  o.sampling.top_p = 0.9;
  o.sampling.seed = 3;
  const StudentRollout a = roll_out_student(student, data, o), again = roll_out_student(student, data, o);
  EXPECT_EQ(a.tokens, again.tokens);
  // Row 1 alone, with its window's position, draws the same continuation as inside the batch.
  data::TokenBatch one = data;
  one.batch = 1;
  one.inputs.assign(data.inputs.begin() + kSeq, data.inputs.begin() + 2 * kSeq);
  one.targets.assign(data.targets.begin() + kSeq, data.targets.begin() + 2 * kSeq);
  one.window_starts = {data.window_starts[1]};
  const StudentRollout alone = roll_out_student(student, one, o);
  EXPECT_EQ(alone.tokens, std::vector<int32_t>(a.tokens.begin() + a.length, a.tokens.begin() + 2 * a.length));
  // Another seed draws other continuations (18 draws from a 64-token vocabulary: the same ones would be a bug).
  o.sampling.seed = 4;
  EXPECT_NE(roll_out_student(student, data, o).tokens, a.tokens);
}

TEST(StudentRollout, PromptsThatDoNotFitAreErrorsNamingTheKeys) {
  GptModel student(tiny_config());
  student.initialize(11);
  const data::TokenBatch data = random_batch(kRows, kSeq, 5);
  RolloutOptions o = greedy_options();
  o.prompt_tokens = kSeq + 1;
  EXPECT_NE(testing::message_of([&] { roll_out_student(student, data, o); }).find("distill.on_policy_prompt_tokens"),
            std::string::npos);
  o = greedy_options();
  o.new_tokens = 12;  // 5 + 12 > block_size 16
  const std::string message = testing::message_of([&] { roll_out_student(student, data, o); });
  EXPECT_NE(message.find("distill.on_policy_new_tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("model.block_size"), std::string::npos) << message;
}

}  // namespace
}  // namespace retort::distill
