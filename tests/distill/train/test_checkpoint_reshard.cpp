// A checkpoint written at one tensor-parallel degree serves inference at another: the weights are re-split on
// load (apps/checkpoint load_model_weights), so each rank's local logits are exactly its vocabulary slice of the
// dense model's, whichever tp wrote the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/autograd/grad_mode.h"
#include "core/tensor/slicing.h"
#include "distill/train/checkpoint.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "optim/adamw/adamw.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/tp/sharding.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tiny_with_four_heads(const fs::path& run_dir) {
  auto args = testing::tiny_overrides(run_dir);
  args.push_back("model.n_head=4");  // so that tp 4 divides the heads too
  return args;
}

Tensor probe_tokens(int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 2 * 16; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return Tensor::from_ints(ids, {2, 16});
}

// Logits [2, 16, V_local] of `run_dir` loaded at `tp`, gathered to the full vocabulary on every rank, and each
// rank's local logits compared with its slice of `dense`.
void expect_every_rank_holds_its_slice(const fs::path& run_dir, int tp, const Tensor& dense) {
  const int64_t vocab = dense.size(-1);
  run_ranks(tp, [&](std::shared_ptr<Communicator> group) {
    NoGradGuard no_grad;
    const TrainedModel model = load_trained_model(run_dir, Device::cpu(), group);
    const Tensor local = inference_logits(model, probe_tokens(vocab));
    const int64_t width = vocab / tp;
    ASSERT_EQ(local.size(-1), width);
    const Tensor expected = narrow_copy(dense, 2, group->rank() * width, width);
    const auto got = local.to_doubles(), want = expected.to_doubles();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::abs(want[i]))) << "rank " << group->rank() << " at " << i;
  });
}

TEST(CheckpointReshard, DenseCheckpointServesAtTp2And4) {
  const fs::path run = testing::fresh_dir("reshard_dense");
  run_label_training(testing::resolve(tiny_with_four_heads(run)), Device::cpu(), false);
  NoGradGuard no_grad;
  const TrainedModel dense = load_trained_model(run, Device::cpu());
  const Tensor logits = inference_logits(dense, probe_tokens(dense.vocab_size));
  for (int tp : {2, 4}) expect_every_rank_holds_its_slice(run, tp, logits);
}

TEST(CheckpointReshard, Tp2CheckpointServesDenseAndAtTp4) {
  // Write a tp 2 checkpoint by hand: the dense run's weights split in two, saved as the tp 2 shards.
  const fs::path dense_run = testing::fresh_dir("reshard_src"), tp2_run = testing::fresh_dir("reshard_tp2");
  run_label_training(testing::resolve(tiny_with_four_heads(dense_run)), Device::cpu(), false);
  NoGradGuard no_grad;
  const TrainedModel dense = load_trained_model(dense_run, Device::cpu());
  const Tensor logits = inference_logits(dense, probe_tokens(dense.vocab_size));
  fs::create_directories(tp2_run);
  fs::copy_file(dense_run / "config.yaml", tp2_run / "config.yaml");
  run_ranks(2, [&](std::shared_ptr<Communicator> group) {
    const TrainedModel split = load_trained_model(dense_run, Device::cpu(), group);
    CheckpointShard shard;
    shard.tp_rank = group->rank();
    shard.tp_size = 2;
    shard.main = group->rank() == 0;
    shard.barrier = [group] { group->barrier(); };
    optim::AdamW unused_optimizer({{"all", split.model->named_parameters(), 0.0}}, {});
    save_checkpoint(tp2_run, dense.step, *split.model, unused_optimizer, nlohmann::json::object(), 1, shard);
  });
  ASSERT_TRUE(fs::exists(tp2_run / "checkpoints" / "latest"));
  const TrainedModel back = load_trained_model(tp2_run, Device::cpu());
  const auto got = inference_logits(back, probe_tokens(dense.vocab_size)).to_doubles(), want = logits.to_doubles();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::abs(want[i]))) << i;
  expect_every_rank_holds_its_slice(tp2_run, 4, logits);
}

}  // namespace
}  // namespace retort::distill
