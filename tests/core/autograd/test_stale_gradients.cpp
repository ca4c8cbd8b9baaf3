// Tensor::mark_grad_stale: the buffer stays (same storage, so a recorded graph's address stays valid), the next
// backward writes over it instead of adding, a second backward before the next mark adds as usual, and a parameter
// the backward never reaches keeps its stale mark (an optimizer then skips it). Checked against values computed by
// hand here: d/dx sum(x * w) = w.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "core/tensor/tensor.h"

namespace retort {
namespace {

TEST(StaleGradients, TheNextBackwardWritesOverTheBufferAndLaterOnesAdd) {
  Tensor x = Tensor::from_floats({1, 2, 3}, {3});
  Tensor unused = Tensor::from_floats({5}, {1});
  x.set_requires_grad(true);
  unused.set_requires_grad(true);
  const Tensor w = Tensor::from_floats({0.5f, -1, 4}, {3});
  ops::sum(ops::mul(x, w)).backward();
  unused.set_grad(Tensor::from_floats({7}, {1}));
  const void* buffer = x.grad().raw_data();
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{0.5f, -1, 4}));

  x.mark_grad_stale();
  unused.mark_grad_stale();
  EXPECT_TRUE(x.grad_is_stale());
  ops::sum(ops::mul(x, ops::scale(w, 2.0))).backward();
  EXPECT_FALSE(x.grad_is_stale());
  EXPECT_EQ(x.grad().raw_data(), buffer) << "the same buffer, written over";
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{1, -2, 8})) << "not 1.5, -3, 12: the old values are gone";
  EXPECT_TRUE(unused.grad_is_stale()) << "no gradient reached it";

  ops::sum(ops::mul(x, w)).backward();  // accumulates as usual
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{1.5f, -3, 12}));
  x.zero_grad();
  EXPECT_FALSE(x.grad_is_stale());
  Tensor no_grad_yet = Tensor::from_floats({1}, {1});
  no_grad_yet.mark_grad_stale();
  EXPECT_FALSE(no_grad_yet.grad_is_stale()) << "nothing to keep: the next gradient is simply the first";
}

}  // namespace
}  // namespace retort
