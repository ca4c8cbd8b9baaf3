// ops::rotary_embedding on the CPU: against the rotate-half rotation written in float64, with positions far apart
// (0 to 131071, where the float32 angle itself is what the op must reproduce), plain and Llama 3 scaled inverse
// frequencies, several heads, in f64, f32 and bf16; the gradient against finite differences and as the inverse
// rotation; bad arguments.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/core/ops/decoder_ops_test_support.h"

namespace retort {
namespace {

using namespace decoder_ops_testing;

std::vector<float> plain_inv_freq(int64_t head_dim, double theta) {
  std::vector<float> out;
  for (int64_t j = 0; j < head_dim / 2; ++j)
    out.push_back(static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * j) / head_dim)));
  return out;
}

// Positions of a [2, 6] batch: neighbours, far apart, and beyond Llama 3's original context.
const std::vector<int32_t> kPositions = {0, 1, 2, 7, 4095, 8191, 100, 101, 65535, 70000, 131071, 3};

void expect_rotation(const std::vector<float>& inv_freq, int64_t head_dim, int64_t heads, const std::string& what) {
  const int64_t B = 2, T = 6, width = heads * head_dim;
  const std::vector<double> xs = normal_values(B * T * width, 11);
  const Tensor positions = Tensor::from_ints(kPositions, {B, T});
  const Tensor freq = Tensor::from_floats(inv_freq, {head_dim / 2});
  struct Case {
    DType dtype;
    double tolerance;  // of max |out - ref| / max |ref|
  };
  // f64: cos and sin of the same float32 angle; f32: their float32 values and two products; bf16: one rounding of
  // the output to 8 significant bits.
  for (const Case& c : {Case{DType::F64, 1e-14}, Case{DType::F32, 1e-6}, Case{DType::BF16, 1.0 / 256}}) {
    const Tensor x = Tensor::from_doubles(xs, {B, T, width}, DType::F64).to(c.dtype);
    const Tensor out = ops::rotary_embedding(x, positions, freq, head_dim);
    EXPECT_EQ(out.dtype(), c.dtype);
    const std::vector<double> ref = rotary_reference(x.to_doubles(), kPositions, inv_freq, head_dim, width);
    EXPECT_LT(scaled_max_error(out.to_doubles(), ref), c.tolerance) << what << " " << dtype_name(c.dtype);
  }
}

TEST(RotaryEmbedding, MatchesFloat64RotateHalf) {
  expect_rotation(plain_inv_freq(8, 10000.0), 8, 3, "head_dim 8, theta 1e4");
  expect_rotation(plain_inv_freq(16, 1000000.0), 16, 2, "head_dim 16, theta 1e6");
  expect_rotation(plain_inv_freq(128, 500000.0), 128, 2, "head_dim 128, theta 5e5");
}

TEST(RotaryEmbedding, MatchesFloat64WithLlama3ScaledFrequencies) {
  // Llama 3.1's rope_scaling: factor 8, low 1, high 4, original context 8192.
  const std::vector<float> scaled = llama3_inv_freq(64, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  const std::vector<float> plain = plain_inv_freq(64, 500000.0);
  // The scaling changes the low frequencies and keeps the high ones: the test passes values the op cannot derive.
  EXPECT_EQ(scaled.front(), plain.front());
  EXPECT_NEAR(scaled.back(), plain.back() / 8, 1e-6 * plain.back());
  expect_rotation(scaled, 64, 2, "llama3-scaled head_dim 64");
}

TEST(RotaryEmbedding, PositionZeroIsTheIdentityAndRotationsKeepNorms) {
  const int64_t head_dim = 8;
  const Tensor x = normal_tensor({1, 2, 16}, 5, DType::F64);
  const Tensor out = ops::rotary_embedding(x, Tensor::from_ints({0, 9}, {1, 2}),
                                           Tensor::from_floats(plain_inv_freq(head_dim, 10000.0), {4}), head_dim);
  const std::vector<double> a = x.to_doubles(), b = out.to_doubles();
  for (int i = 0; i < 16; ++i) EXPECT_DOUBLE_EQ(b[i], a[i]);  // position 0
  // Each pair (j, j + 4) of each head keeps its length at position 9.
  for (int h0 = 16; h0 < 32; h0 += 8)
    for (int j = 0; j < 4; ++j)
      EXPECT_NEAR(std::hypot(b[h0 + j], b[h0 + j + 4]), std::hypot(a[h0 + j], a[h0 + j + 4]), 1e-12);
}

TEST(RotaryEmbedding, GradientIsTheInverseRotationAndMatchesFiniteDifferences) {
  const int64_t head_dim = 6;
  const Tensor positions = Tensor::from_ints({3, 0, 17, 4000, 1, 2}, {2, 3});
  const Tensor freq = Tensor::from_floats(plain_inv_freq(head_dim, 100.0), {3});
  std::mt19937_64 rng(4);
  Tensor x = testing::random_tensor({2, 3, 2 * head_dim}, rng);
  x.set_requires_grad();
  testing::expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return ops::rotary_embedding(in[0], positions, freq, head_dim); }, {x});
  // Rotating, then sending the result back as the gradient, gives the input: the gradient is the inverse.
  x.zero_grad();
  Tensor y = ops::rotary_embedding(x, positions, freq, head_dim);
  y.backward(y.detach().clone());
  EXPECT_LT(scaled_max_error(x.grad().to_doubles(), x.to_doubles()), 1e-14);
}

TEST(RotaryEmbedding, BadArgumentsAreRejected) {
  const Tensor x = Tensor::zeros({1, 2, 12});
  const Tensor positions = Tensor::from_ints({0, 1}, {1, 2});
  EXPECT_THROW(ops::rotary_embedding(x, positions, Tensor::zeros({3}), 5), InputError);  // odd head_dim
  EXPECT_THROW(ops::rotary_embedding(x, positions, Tensor::zeros({4}), 8), InputError);  // 12 is not 8 * heads
  EXPECT_THROW(ops::rotary_embedding(x, positions, Tensor::zeros({2}), 6), Error);       // inv_freq too short
  EXPECT_THROW(ops::rotary_embedding(x, Tensor::from_ints({0, 1, 2}, {1, 3}), Tensor::zeros({3}), 6), Error);
}

}  // namespace
}  // namespace retort
