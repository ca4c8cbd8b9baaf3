// Every Gloo collective against the obvious result, at world sizes 1 to 4 with thread ranks: the expected
// values are computed here element by element from the inputs every rank is known to hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/parallel/comm/test_comm_support.h"

namespace retort {
namespace {

using comm_testing::input_value;
using comm_testing::on_ranks;
using comm_testing::rank_tensor;
using comm_testing::stored;

constexpr int kWorldSizes[] = {1, 2, 3, 4};

double reduce_over_ranks(int world, int64_t index, DType dtype, ReduceOp op) {
  double result = op == ReduceOp::Sum ? 0.0 : -1e300;
  for (int r = 0; r < world; ++r) {
    const double v = input_value(r, index, dtype);
    result = op == ReduceOp::Sum ? result + v : std::max(result, v);
  }
  return result;
}

// Row-major multi-index of a flat index.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

TEST(CommCollectives, AllReduceSumAndMaxInEveryDtype) {
  for (int world : kWorldSizes) {
    on_ranks(world, [world](std::shared_ptr<Communicator> comm) {
      EXPECT_EQ(comm->size(), world);
      for (DType dtype : {DType::F32, DType::F64, DType::I32, DType::BF16}) {
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
            Tensor t = rank_tensor(comm->rank(), {n}, dtype);
            comm->all_reduce(t, op);
            const auto got = t.to_doubles();
            int64_t wrong = 0, first_wrong = -1;
            for (int64_t i = 0; i < n; ++i) {
              if (got[i] != stored(reduce_over_ranks(world, i, dtype, op), dtype)) {
                if (wrong++ == 0) first_wrong = i;
              }
            }
            EXPECT_EQ(wrong, 0) << dtype_name(dtype) << " n=" << n << " " << reduce_op_name(op) << " world " << world
                                << ": first wrong element " << first_wrong;
          }
        }
      }
    });
  }
}

TEST(CommCollectives, AllGatherAlongEveryDimOfA3dTensor) {
  const Shape local = {2, 3, 5};
  for (int world : kWorldSizes) {
    on_ranks(world, [&](std::shared_ptr<Communicator> comm) {
      for (DType dtype : {DType::F32, DType::BF16, DType::I32}) {
        for (int dim : {0, 1, -1}) {
          const Tensor out = comm->all_gather(rank_tensor(comm->rank(), local, dtype), dim);
          const int d = dim < 0 ? dim + 3 : dim;
          Shape expected_shape = local;
          expected_shape[d] *= world;
          ASSERT_EQ(out.shape(), expected_shape);
          const auto got = out.to_doubles();
          for (int64_t flat = 0; flat < out.numel(); ++flat) {
            auto index = unravel(flat, expected_shape);
            const int source_rank = static_cast<int>(index[d] / local[d]);
            index[d] %= local[d];
            const double expected = input_value(source_rank, ravel(index, local), dtype);
            ASSERT_EQ(got[flat], expected)
                << dtype_name(dtype) << " dim " << dim << " world " << world << " element " << flat;
          }
        }
      }
    });
  }
}

TEST(CommCollectives, ReduceScatterAlongDimZeroAndOne) {
  for (int world : kWorldSizes) {
    on_ranks(world, [world](std::shared_ptr<Communicator> comm) {
      for (DType dtype : {DType::F32, DType::F64, DType::I32, DType::BF16}) {
        for (int dim : {0, 1}) {
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
            const Shape full = dim == 0 ? Shape{2 * world, 3} : Shape{2, 3 * world, 4};
            const Tensor out = comm->reduce_scatter(rank_tensor(comm->rank(), full, dtype), dim, op);
            Shape expected_shape = full;
            expected_shape[dim] /= world;
            ASSERT_EQ(out.shape(), expected_shape);
            const auto got = out.to_doubles();
            for (int64_t flat = 0; flat < out.numel(); ++flat) {
              auto index = unravel(flat, expected_shape);
              index[dim] += comm->rank() * expected_shape[dim];
              const double expected = stored(reduce_over_ranks(world, ravel(index, full), dtype, op), dtype);
              ASSERT_EQ(got[flat], expected) << dtype_name(dtype) << " dim " << dim << " " << reduce_op_name(op)
                                             << " world " << world << " element " << flat;
            }
          }
        }
      }
    });
  }
}

TEST(CommCollectives, ReduceScatterOfAnIndivisibleDimNamesTheSizes) {
  on_ranks(3, [](std::shared_ptr<Communicator> comm) {
    const std::string message = [&] {
      try {
        comm->reduce_scatter(Tensor::zeros({2, 4}), 1);
      } catch (const InputError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    }();
    EXPECT_NE(message.find("dim 1"), std::string::npos) << message;
    EXPECT_NE(message.find("size 4"), std::string::npos) << message;
    EXPECT_NE(message.find("group size 3"), std::string::npos) << message;
  });
}

TEST(CommCollectives, BroadcastFromEveryRoot) {
  for (int world : kWorldSizes) {
    on_ranks(world, [world](std::shared_ptr<Communicator> comm) {
      for (DType dtype : {DType::F32, DType::BF16, DType::F64, DType::I32}) {
        for (int root = 0; root < world; ++root) {
          Tensor t = rank_tensor(comm->rank(), {3, 11}, dtype);
          comm->broadcast(t, root);
          EXPECT_EQ(t.to_doubles(), rank_tensor(root, {3, 11}, dtype).to_doubles())
              << dtype_name(dtype) << " root " << root << " world " << world;
        }
      }
    });
  }
}

TEST(CommCollectives, BarrierHoldsEveryRankUntilAllArrive) {
  for (int world : kWorldSizes) {
    std::atomic<int> arrived{0};
    on_ranks(world, [&](std::shared_ptr<Communicator> comm) {
      // The last rank arrives late: nobody may leave the barrier before it has arrived.
      if (comm->rank() == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      arrived.fetch_add(1);
      comm->barrier();
      EXPECT_EQ(arrived.load(), world);
      comm->barrier();  // a second one on the same group still pairs up
    });
  }
}

TEST(CommCollectives, SplitIntoTensorAndDataParallelGroups) {
  on_ranks(4, [](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    // tp innermost: {0,1} and {2,3}; dp across: {0,2} and {1,3}.
    auto tp = comm->split(rank / 2, rank);
    auto dp = comm->split(rank % 2, rank);
    ASSERT_TRUE(tp && dp);
    EXPECT_EQ(tp->size(), 2);
    EXPECT_EQ(tp->rank(), rank % 2);
    EXPECT_EQ(dp->rank(), rank / 2);
    Tensor x = Tensor::full({5}, rank + 1.0);
    tp->all_reduce(x);
    EXPECT_EQ(x.to_doubles()[0], rank < 2 ? 3.0 : 7.0);  // (1 + 2) or (3 + 4)
    Tensor y = Tensor::full({5}, rank + 1.0);
    dp->all_reduce(y);
    EXPECT_EQ(y.to_doubles()[0], rank % 2 == 0 ? 4.0 : 6.0);  // (1 + 3) or (2 + 4)
    // Groups of a group, and the parent still works after its children were made.
    auto single = tp->split(tp->rank(), 0);
    ASSERT_TRUE(single);
    EXPECT_EQ(single->size(), 1);
    Tensor z = Tensor::full({2}, 1.0);
    comm->all_reduce(z);
    EXPECT_EQ(z.to_doubles()[0], 4.0);
  });
}

TEST(CommCollectives, SplitOrdersByKeyAndLeavesOutNegativeColors) {
  on_ranks(4, [](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    auto reversed = comm->split(0, -rank);
    ASSERT_TRUE(reversed);
    EXPECT_EQ(reversed->rank(), 3 - rank);
    auto odd_only = comm->split(rank % 2 == 1 ? 5 : -1, 0);
    EXPECT_EQ(odd_only != nullptr, rank % 2 == 1);
    if (odd_only) {
      EXPECT_EQ(odd_only->size(), 2);
      EXPECT_EQ(odd_only->rank(), rank / 2);  // equal keys: parent rank order
    }
    auto listed = comm->new_group({3, 1});
    EXPECT_EQ(listed != nullptr, rank == 3 || rank == 1);
    if (listed) {
      EXPECT_EQ(listed->rank(), rank == 3 ? 0 : 1);
      Tensor t = Tensor::full({1}, static_cast<double>(rank));
      listed->broadcast(t, 0);
      EXPECT_EQ(t.item(), 3.0);
    }
  });
}

TEST(CommCollectives, EmptyTensorsAndNegativeDims) {
  on_ranks(2, [](std::shared_ptr<Communicator> comm) {
    Tensor empty = Tensor::zeros({0, 3});
    comm->all_reduce(empty);
    EXPECT_EQ(comm->all_gather(empty, 0).shape(), (Shape{0, 3}));
    EXPECT_EQ(comm->all_gather(empty, -1).shape(), (Shape{0, 6}));
    EXPECT_EQ(comm->all_gather(Tensor::zeros({2, 3}), -2).shape(), (Shape{4, 3}));
  });
}

}  // namespace
}  // namespace retort
