// autograd::record_folding: a node that receives the gradient its input has gathered so far and returns it added
// to its own part. Whether that gradient arrives before the node runs (handed over) or after (added by the tape
// as usual), the leaf's gradient is the same, and the handed-over tensor is never written in place.
#include <gtest/gtest.h>

#include "core/autograd/engine.h"
#include "core/kernels/kernels.h"
#include "core/ops/ops.h"
#include "core/util/error.h"

namespace retort {
namespace {

struct FoldLog {
  int calls = 0, handed_over = 0;
};

// y = 2 s, recorded as folding into s: the closure returns 2 g + gathered.
Tensor doubled_folding(const Tensor& s, FoldLog& log) {
  Tensor y = Tensor::empty(s.shape(), s.dtype(), s.device());
  kernels::scale(s, 2.0f, y);
  return autograd::record_folding(y, "doubled", {s}, 0, [&log](const Tensor& g, const Tensor& gathered) {
    ++log.calls;
    Tensor gs = Tensor::empty(g.shape(), g.dtype(), g.device());
    kernels::scale(g, 2.0f, gs);
    if (gathered.defined()) {
      ++log.handed_over;
      kernels::add(gs, gathered, gs, 1.0f, 1.0f);
    }
    return std::vector<Tensor>{gs};
  });
}

// d/dx of sum(2 s + 3 s) with s = x + x is 10 per element, in either order of the two uses of s.
void expect_gradient_in_order(bool folding_first, int expected_handed_over) {
  Tensor x = Tensor::from_doubles({1.0, -2.0, 0.5}, {3}, DType::F64);
  x.set_requires_grad();
  FoldLog log;
  const Tensor s = ops::add(x, x);
  const Tensor y = doubled_folding(s, log);
  const Tensor c = ops::scale(s, 3.0);
  // The tape runs the root's later inputs' subgraphs first: the scale's gradient reaches s before the folding
  // node runs when the scale is the second operand, after it when it is the first.
  const Tensor root = folding_first ? ops::add(c, y) : ops::add(y, c);
  ops::sum(root).backward();
  EXPECT_EQ(log.calls, 1);
  EXPECT_EQ(log.handed_over, expected_handed_over);
  for (double g : x.grad().to_doubles()) EXPECT_DOUBLE_EQ(g, 10.0);
}

TEST(RecordFolding, GradientGatheredBeforeTheNodeIsHandedOver) {
  expect_gradient_in_order(false, 1);
}

TEST(RecordFolding, GradientArrivingAfterTheNodeIsAddedByTheTape) {
  expect_gradient_in_order(true, 0);
}

TEST(RecordFolding, FoldInputMustExist) {
  Tensor x = Tensor::zeros({2});
  x.set_requires_grad();
  EXPECT_THROW(autograd::record_folding(Tensor::zeros({2}), "bad", {x}, 1,
                                        [](const Tensor&, const Tensor&) { return std::vector<Tensor>{}; }),
               Error);
}

}  // namespace
}  // namespace retort
