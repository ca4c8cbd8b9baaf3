// A vocabulary that does not divide by tp: the model pads it to the next multiple of tp with zero rows, the logits of
// the padded ids are -inf on the rank that holds them, the real logits equal the dense model's (built from the same
// seed at the real size), and the cross-entropy over the padded logits equals the dense one.
#include <gtest/gtest.h>

#include <cmath>

#include "losses/cross_entropy.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/models/tp_gpt_support.h"

namespace retort {
namespace {

using comm_testing::on_ranks;

TEST(VocabPadding, PaddedIdsAreMinusInfinityAndTheRealLogitsEqualTheDenseModels) {
  GptConfig config = tp_gpt_testing::tiny_config(true, "layernorm");
  config.vocab_size = 61;  // padded to 62 at tp 2, to 64 at tp 4
  std::vector<int32_t> id_values(16);
  for (size_t i = 0; i < id_values.size(); ++i) id_values[i] = static_cast<int32_t>((i * 37 + 11) % 61);
  const Tensor ids = Tensor::from_ints(id_values, {2, 8});
  GptModel dense(config);
  dense.initialize(7);
  const std::vector<double> want = dense.forward(ids, DType::F64).to_doubles();
  const double dense_loss = losses::cross_entropy(dense.forward(ids, DType::F64), ids).item();
  for (int tp : {2, 4}) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      GptModel model(config, group);
      model.initialize(7);
      const Tensor logits = model.forward(ids, DType::F64);
      const int64_t local = logits.size(-1), start = group->rank() * local;
      ASSERT_EQ(local * tp, config.padded_vocab(tp));
      const std::vector<double> got = logits.to_doubles();
      for (int64_t row = 0; row < 16; ++row)
        for (int64_t c = 0; c < local; ++c) {
          const double g = got[static_cast<size_t>(row * local + c)];
          if (start + c >= config.vocab_size)
            EXPECT_TRUE(std::isinf(g) && g < 0) << "padded id " << start + c;
          else
            EXPECT_NEAR(g, want[static_cast<size_t>(row * config.vocab_size + start + c)], 1e-12);
        }
      EXPECT_NEAR(losses::cross_entropy(logits, ids).item(), dense_loss, 1e-12);
    });
  }
}

}  // namespace
}  // namespace retort
