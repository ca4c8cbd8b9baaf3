// Every differentiable op's gradient against central finite differences (float64, CPU).
#include "core/ops/ops.h"
#include "gradcheck.h"

namespace retort {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;

class OpGradcheck : public ::testing::Test {
 protected:
  Tensor param(const Shape& shape, double scale = 1.0) {
    return random_tensor(shape, rng_, scale).set_requires_grad(true);
  }
  std::mt19937_64 rng_{1234};
};

TEST_F(OpGradcheck, Add) {
  expect_gradients_match([](const auto& in) { return ops::add(in[0], in[1]); }, {param({3, 5}), param({3, 5})});
}

TEST_F(OpGradcheck, Sub) {
  expect_gradients_match([](const auto& in) { return ops::sub(in[0], in[1]); }, {param({4, 3}), param({4, 3})});
}

TEST_F(OpGradcheck, Mul) {
  expect_gradients_match([](const auto& in) { return ops::mul(in[0], in[1]); }, {param({2, 7}), param({2, 7})});
}

TEST_F(OpGradcheck, Scale) {
  expect_gradients_match([](const auto& in) { return ops::scale(in[0], -2.5); }, {param({6})});
}

TEST_F(OpGradcheck, AddBias) {
  expect_gradients_match([](const auto& in) { return ops::add_bias(in[0], in[1]); }, {param({2, 3, 5}), param({5})});
}

TEST_F(OpGradcheck, Gelu) {
  expect_gradients_match([](const auto& in) { return ops::gelu(in[0]); }, {param({5, 9}, 2.0)});
}

TEST_F(OpGradcheck, SumAndMean) {
  expect_gradients_match([](const auto& in) { return ops::sum(in[0]); }, {param({3, 4})});
  expect_gradients_match([](const auto& in) { return ops::mean(in[0]); }, {param({3, 4})});
}

TEST_F(OpGradcheck, MatmulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = param(ta ? Shape{4, 3} : Shape{3, 4});
      Tensor b = param(tb ? Shape{5, 4} : Shape{4, 5});
      expect_gradients_match([ta, tb](const auto& in) { return ops::matmul(in[0], in[1], ta, tb); }, {a, b});
    }
  }
}

TEST_F(OpGradcheck, MatmulBatched) {
  expect_gradients_match([](const auto& in) { return ops::matmul(in[0], in[1]); },
                         {param({2, 3, 4}), param({2, 4, 5})});
  expect_gradients_match([](const auto& in) { return ops::matmul(in[0], in[1], false, true); },
                         {param({2, 3, 4}), param({2, 5, 4})});
}

TEST_F(OpGradcheck, MatmulSharedRightOperand) {
  expect_gradients_match([](const auto& in) { return ops::matmul(in[0], in[1]); }, {param({2, 3, 4}), param({4, 5})});
  expect_gradients_match([](const auto& in) { return ops::matmul(in[0], in[1], false, true); },
                         {param({2, 3, 4}), param({5, 4})});
}

TEST_F(OpGradcheck, Linear) {
  expect_gradients_match([](const auto& in) { return ops::linear(in[0], in[1], in[2]); },
                         {param({2, 3, 4}), param({5, 4}), param({5})});
  expect_gradients_match([](const auto& in) { return ops::linear(in[0], in[1], Tensor()); },
                         {param({3, 4}), param({2, 4})});
}

TEST_F(OpGradcheck, LayerNorm) {
  expect_gradients_match([](const auto& in) { return ops::layer_norm(in[0], in[1], in[2]); },
                         {param({4, 7}, 3.0), param({7}), param({7})});
  expect_gradients_match([](const auto& in) { return ops::layer_norm(in[0], in[1], Tensor()); },
                         {param({3, 6}), param({6})});
}

TEST_F(OpGradcheck, RmsNorm) {
  expect_gradients_match([](const auto& in) { return ops::rms_norm(in[0], in[1]); }, {param({4, 7}, 2.0), param({7})});
}

TEST_F(OpGradcheck, Softmax) {
  expect_gradients_match([](const auto& in) { return ops::softmax(in[0]); }, {param({3, 8}, 2.0)});
}

TEST_F(OpGradcheck, CausalSelfAttention) {
  for (int64_t T : {1, 5}) {
    expect_gradients_match([](const auto& in) { return ops::causal_self_attention(in[0], 2); }, {param({2, T, 3 * 6})});
  }
}

TEST_F(OpGradcheck, Embedding) {
  Tensor ids = Tensor::from_ints({3, 0, 3, 1, 4, 3}, {2, 3});
  expect_gradients_match([ids](const auto& in) { return ops::embedding(in[0], ids); }, {param({5, 4})});
}

TEST_F(OpGradcheck, Reshape) {
  expect_gradients_match([](const auto& in) { return ops::gelu(ops::reshape(in[0], {4, 3})); }, {param({2, 6})});
}

TEST_F(OpGradcheck, SharedInputAccumulates) {
  // y = x * x + x: the gradient through both uses must add up.
  expect_gradients_match([](const auto& in) { return ops::add(ops::mul(in[0], in[0]), in[0]); }, {param({5})});
}

}  // namespace
}  // namespace retort
