// The tensor-parallel GPT on two GPUs over NCCL (thread ranks, one GPU each): the logits shard and each rank's
// LOCAL gradients against the dense float64 CPU model from the same seed. The GPU computes in f32 (cuBLAS
// without TF32), hence the 2e-4 tolerance. Skipped without two GPUs.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/models/tp_gpt_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort {
namespace {

using namespace tp_testing;
using namespace tp_gpt_testing;

TEST(TpGptNccl, TwoGpusMatchTheDenseModel) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (bool tied : {true, false}) {
    const GptConfig config = tiny_config(tied, "layernorm");
    const Mat r = random_mat(16, config.vocab_size, 5);
    const DenseRun dense = run_dense(config, r);
    comm_testing::on_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
      const int rank = gloo->rank(), tp = 2;
      const Device gpu = Device::cuda(rank);
      auto nccl = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
      GptModel model(config, nccl);
      model.initialize(7);
      model.to(gpu);
      Tensor logits = model.forward(batch_ids().to(gpu), DType::F32);
      EXPECT_EQ(logits.sharding().group.get(), nccl.get());
      expect_close(logits, shard(dense.logits, false, 1, rank, tp), 2e-4, "logits shard");
      ops::sum(ops::mul(logits, to_tensor(shard(r, false, 1, rank, tp)).to(gpu).view(logits.shape()))).backward();
      for (auto& [name, p] : model.named_parameters()) {
        const ShardingSpec& spec = p.sharding();
        const bool by_rows = spec.partition_dim == 0 && p.ndim() == 2;
        const Mat& full = dense.grads.at(name);
        expect_close(p.grad(), spec.partition_dim < 0 ? full : shard(full, by_rows, spec.blocks, rank, tp), 2e-4,
                     name + (tied ? " (tied)" : " (untied)"));
      }
    });
  }
#endif
}

}  // namespace
}  // namespace retort
