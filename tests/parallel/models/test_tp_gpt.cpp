// The whole tensor-parallel GPT at tp 1, 2, 4 and 8 against the dense model built from the same seed: the
// gathered logits equal the dense logits, and each rank's LOCAL gradient of every parameter equals the matching
// slice of the dense gradient (q | k | v rows per head block, MLP and vocabulary slices, replicated norms).
// Both run in f64 compute with f32 master weights; the loss sum(logits * R) seeds a known dL/dlogits.
#include <gtest/gtest.h>

#include <map>

#include "core/ops/ops.h"
#include "parallel/models/gpt_model.h"
#include "parallel/tp/sharding.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/models/tp_gpt_support.h"
#include "tests/parallel/tp/tp_test_support.h"

namespace retort {
namespace {

using comm_testing::on_ranks;
using namespace tp_testing;
using tp_gpt_testing::batch_ids;
using tp_gpt_testing::DenseRun;
using tp_gpt_testing::run_dense;
using tp_gpt_testing::tiny_config;

class TpGpt : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(TpGpt, LogitsAndLocalGradientsMatchTheDenseModel) {
  const auto [tied, norm] = GetParam();
  const GptConfig four_heads = tiny_config(tied, norm);
  // 4 heads do not split over 8 ranks: tp 8 runs the same model with 8 heads of width 2, against its own dense run.
  GptConfig eight_heads = four_heads;
  eight_heads.n_head = 8;
  const Mat r = random_mat(16, four_heads.vocab_size, 5);
  const DenseRun dense_four = run_dense(four_heads, r), dense_eight = run_dense(eight_heads, r);
  for (int tp : kTpSizes) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    const GptConfig& config = tp <= four_heads.n_head ? four_heads : eight_heads;
    const DenseRun& dense = tp <= four_heads.n_head ? dense_four : dense_eight;
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      const int rank = group->rank();
      GptModel model(config, group);
      model.initialize(7);
      Tensor logits = model.forward(batch_ids(), DType::F64);
      ASSERT_EQ(logits.shape(), (Shape{2, 8, config.vocab_size / tp}));
      expect_close(logits, shard(dense.logits, false, 1, rank, tp), 1e-12, "logits shard");
      expect_close(tp::gather_full(logits, logits.sharding()), dense.logits, 1e-12, "gathered logits");
      ops::sum(ops::mul(logits, to_tensor(shard(r, false, 1, rank, tp), DType::F64).view(logits.shape()))).backward();
      int sharded = 0;
      for (auto& [name, p] : model.named_parameters()) {
        const ShardingSpec& spec = p.sharding();
        const Mat& full = dense.grads.at(name);
        // 2-D weights split along rows (dim 0) or columns (dim 1); 1-D biases along their only dim.
        const bool by_rows = spec.partition_dim == 0 && p.ndim() == 2;
        const Mat want = spec.partition_dim < 0 || tp == 1 ? full : shard(full, by_rows, spec.blocks, rank, tp);
        expect_close(p.grad(), want, 1e-6, name);
        if (tp > 1) {
          EXPECT_TRUE(spec.group != nullptr) << name << " carries no tp group";
          sharded += spec.partition_dim >= 0;
        }
      }
      // wte, and per block qkv (weight, bias), proj weight, fc (weight, bias), proj weight; plus an untied head.
      if (tp > 1) {
        EXPECT_EQ(sharded, 1 + 2 * 6 + (tied ? 0 : 1));
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TpGpt,
                         ::testing::Values(std::make_tuple(true, std::string("layernorm")),
                                           std::make_tuple(false, std::string("layernorm")),
                                           std::make_tuple(true, std::string("rmsnorm"))),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Tied" : "Untied") +
                                  (std::get<1>(info.param) == "layernorm" ? "LayerNorm" : "RmsNorm");
                         });

TEST(TpGptErrors, SizesThatDoNotDivideNameTheValue) {
  on_ranks(3, [](std::shared_ptr<Communicator> group) {
    GptConfig c = tiny_config(true, "layernorm");
    c.vocab_size = 66;
    c.n_head = 3;
    c.n_embd = 12;
    try {
      GptModel model(c, group);  // heads and width divide by 3; 66 does too: fine
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    c.n_head = 4;
    try {
      GptModel model(c, group);
      ADD_FAILURE() << "4 heads over 3 ranks were accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("model.n_head = 4 does not divide by parallel.tp = 3"), std::string::npos)
          << e.what();
    }
    // A vocabulary that does not divide is padded, not refused (test_vocab_padding.cpp checks its logits).
    c.n_head = 3;
    c.vocab_size = 64;
    GptModel padded(c, group);
    EXPECT_EQ(padded.named_parameters().front().second.size(0), 22);  // wte: 66 rows over 3 ranks
    group->barrier();  // no rank leaves (closing its connections) before every rank has connected
  });
}

}  // namespace
}  // namespace retort
