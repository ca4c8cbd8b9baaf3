// ops::swiglu on the CPU: against silu(gate) * up written in float64, in f64, f32 and bf16 (large gates of both
// signs included, where the sigmoid saturates), and its gradients against finite differences.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/core/ops/decoder_ops_test_support.h"

namespace retort {
namespace {

using namespace decoder_ops_testing;

TEST(Swiglu, MatchesFloat64Math) {
  const Shape shape{3, 5, 37};
  // Gates of scale 6 reach |g| > 20, where exp(-g) overflows float32 or the sigmoid rounds to 1.
  const std::vector<double> g = normal_values(shape_numel(shape), 1, 6.0), u = normal_values(shape_numel(shape), 2);
  struct Case {
    DType dtype;
    double tolerance;
  };
  // f32: a few ulp of exp and the products; bf16: the output rounded once to 8 significant bits.
  for (const Case& c : {Case{DType::F64, 1e-14}, Case{DType::F32, 1e-6}, Case{DType::BF16, 1.0 / 256}}) {
    const Tensor gate = Tensor::from_doubles(g, shape, DType::F64).to(c.dtype);
    const Tensor up = Tensor::from_doubles(u, shape, DType::F64).to(c.dtype);
    const Tensor out = ops::swiglu(gate, up);
    EXPECT_EQ(out.dtype(), c.dtype);
    EXPECT_EQ(out.shape(), shape);
    // The reference reads the inputs as the op stored them.
    const std::vector<double> ref = swiglu_reference(gate.to_doubles(), up.to_doubles());
    const std::vector<double> got = out.to_doubles();
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(got[i], ref[i], c.tolerance * std::abs(ref[i]) + 1e-30)
          << dtype_name(c.dtype) << " element " << i << " (gate " << g[i] << ")";
  }
}

TEST(Swiglu, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(3);
  Tensor gate = testing::random_tensor({2, 3, 7}, rng, 2.0);
  Tensor up = testing::random_tensor({2, 3, 7}, rng);
  gate.set_requires_grad();
  up.set_requires_grad();
  testing::expect_gradients_match([](const std::vector<Tensor>& in) { return ops::swiglu(in[0], in[1]); }, {gate, up});
}

TEST(Swiglu, ShapesMustAgree) {
  EXPECT_THROW(ops::swiglu(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), Error);
}

}  // namespace
}  // namespace retort
