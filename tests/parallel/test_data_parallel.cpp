// average_gradients over dp groups of 1 to 4 thread ranks: every rank ends with the mean of the ranks'
// gradients, parameters without a gradient count as zero, and the values are exact (small multiples of 1/4).
#include <gtest/gtest.h>

#include "parallel/data_parallel.h"
#include "tests/parallel/comm/test_comm_support.h"

namespace retort {
namespace {

TEST(DataParallel, AverageGradientsGivesTheMeanOnEveryRank) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE(fmt::format("dp {}", world));
    comm_testing::on_ranks(world, [world](std::shared_ptr<Communicator> dp) {
      const int rank = dp->rank();
      Tensor a = Tensor::zeros({3, 5}), b = Tensor::zeros({7}), none = Tensor::zeros({2});
      std::vector<double> ga(15), gb(7);
      for (int i = 0; i < 15; ++i) ga[i] = 0.25 * (i + 1) * (rank + 1);
      for (int i = 0; i < 7; ++i) gb[i] = -0.5 * i + rank;
      a.set_grad(Tensor::from_doubles(ga, {3, 5}, DType::F32));
      b.set_grad(Tensor::from_doubles(gb, {7}, DType::F32));
      // Rank 0 has no gradient for `none`; the others do: the mean counts rank 0 as zero.
      if (rank > 0) none.set_grad(Tensor::full({2}, 4.0));
      average_gradients({a, b, none}, dp);
      double rank_sum = 0;
      for (int r = 0; r < world; ++r) rank_sum += r + 1;
      if (world == 1) {  // a one-rank group is a no-op: nothing is averaged or created
        EXPECT_FALSE(none.grad().defined());
        EXPECT_EQ(a.grad().to_doubles(), ga);
        return;
      }
      const auto got_a = a.grad().to_doubles(), got_b = b.grad().to_doubles(), got_n = none.grad().to_doubles();
      for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(got_a[i], 0.25 * (i + 1) * rank_sum / world) << i;
      for (int i = 0; i < 7; ++i) EXPECT_FLOAT_EQ(got_b[i], -0.5 * i + (world - 1) / 2.0) << i;
      for (double v : got_n) EXPECT_FLOAT_EQ(v, 4.0 * (world - 1) / world);
    });
  }
}

}  // namespace
}  // namespace retort
