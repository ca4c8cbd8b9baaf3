// The NCCL backend on two GPUs (thread ranks, one GPU each, bootstrapped over Gloo): each collective against
// the same obvious results as the Gloo tests. Skipped without CUDA or with fewer than two GPUs.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/tensor/device.h"
#include "tests/parallel/comm/test_comm_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort {
namespace {

using comm_testing::input_value;
using comm_testing::rank_tensor;
using comm_testing::stored;

TEST(CommNccl, CollectivesOnTwoGpus) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  constexpr int world = 2;
  comm_testing::on_ranks(world, [](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo->rank();
    NcclOptions options;
    options.timeout = std::chrono::seconds(60);
    options.check_metadata = true;
    auto comm = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank, options);
    const Device gpu = Device::cuda(rank);

    for (DType dtype : {DType::F32, DType::BF16, DType::I32, DType::F64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor t = rank_tensor(rank, {1000003}, dtype).to(gpu);
        comm->all_reduce(t, op);
        const auto got = t.to_doubles();
        for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
          const double a = input_value(0, i, dtype), b = input_value(1, i, dtype);
          ASSERT_EQ(got[i], stored(op == ReduceOp::Sum ? a + b : std::max(a, b), dtype))
              << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i;
        }
      }
    }

    const Tensor gathered = comm->all_gather(rank_tensor(rank, {2, 3}, DType::BF16).to(gpu), -1);
    ASSERT_EQ(gathered.shape(), (Shape{2, 6}));
    const auto g = gathered.to_doubles();
    for (int row = 0; row < 2; ++row) {
      for (int col = 0; col < 6; ++col)
        EXPECT_EQ(g[row * 6 + col], input_value(col / 3, row * 3 + col % 3, DType::BF16));
    }

    const Tensor scattered = comm->reduce_scatter(rank_tensor(rank, {3, 4}, DType::F32).to(gpu), 1);
    ASSERT_EQ(scattered.shape(), (Shape{3, 2}));
    const auto s = scattered.to_doubles();
    for (int row = 0; row < 3; ++row) {
      for (int col = 0; col < 2; ++col) {
        const int64_t index = row * 4 + rank * 2 + col;
        EXPECT_EQ(s[row * 2 + col], input_value(0, index, DType::F32) + input_value(1, index, DType::F32));
      }
    }

    Tensor b = rank_tensor(rank, {17}, DType::F32).to(gpu);
    comm->broadcast(b, 1);
    EXPECT_EQ(b.to_doubles(), rank_tensor(1, {17}, DType::F32).to_doubles());
    comm->barrier();

    auto self = comm->split(rank, 0);
    ASSERT_TRUE(self);
    EXPECT_EQ(self->size(), 1);
    Tensor one = Tensor::full({4}, 2.0, DType::F32, gpu);
    self->all_reduce(one);
    EXPECT_EQ(one.to_doubles()[0], 2.0);
  });
#endif
}

TEST(CommNccl, ADeadPeerBecomesAnErrorWithinTheTimeout) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  // The default, non-blocking mode: every NCCL host call is bounded by the timeout. (Blocking mode gives no such
  // guarantee for thread ranks of one process, where a dead rank's teardown can wait inside NCCL for its peer.)
  for (bool blocking : {false}) {
    const auto start = std::chrono::steady_clock::now();
    const auto failures = run_ranks_collect(2, [blocking](std::shared_ptr<Communicator> gloo) {
      const int rank = gloo->rank();
      NcclOptions options;
      options.timeout = std::chrono::seconds(3);
      options.blocking = blocking;
      auto comm = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank, options);
      if (rank == 1) throw InputError("rank 1 stops here on purpose");
      Tensor t = Tensor::full({1 << 20}, 1.0, DType::F32, Device::cuda(rank));
      comm->all_reduce(t);  // enqueued; its kernel waits for a peer that never comes
      comm->barrier();      // host-blocking: must give up when the watchdog aborts
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(failures.size(), 2u);
    EXPECT_EQ(failures[0].rank, 1);
    EXPECT_EQ(failures[1].rank, 0);
    EXPECT_NE(failures[1].message.find("did not finish within 3 s"), std::string::npos) << failures[1].message;
    EXPECT_LT(seconds, 30.0) << "the surviving rank must stop within the timeout";
  }
#endif
}

}  // namespace
}  // namespace retort
