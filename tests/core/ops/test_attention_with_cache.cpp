// ops::attention_with_kv_cache on the CPU: against float64 attention written in the test for random caches,
// random start positions and one or several new positions per row, in f64, f32 and bf16; the rows' padding past
// the capacity; and its errors (grad mode, shapes, start positions).
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "tests/core/ops/attention_cache_test_support.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using namespace attention_cache_testing;
using Starts = std::vector<int64_t>;

TEST(AttentionWithCache, MatchesFloat64AttentionOnTheCpu) {
  for (int64_t Tn : {1, 2, 7}) {
    for (int64_t D : {8, 12, 64}) {
      CacheCase c;
      c.B = 4, c.Tn = Tn, c.H = 3, c.D = D, c.cap = 20, c.seed = static_cast<uint32_t>(Tn * 100 + D);
      expect_matches_reference(c, run_case(c, DType::F64, Device::cpu()), 1e-12, 1e-12, label(c, DType::F64));
      // f32 scores and sums over at most 20 keys of unit-scale values.
      expect_matches_reference(c, run_case(c, DType::F32, Device::cpu()), 1e-6, 1e-5, label(c, DType::F32));
      // bf16 inputs are rounded in the reference too (it reads what the op reads); the op computes in f32 and
      // rounds its output once, to 8 significant bits: half a unit of the last place is 2^-8 of the value.
      expect_matches_reference(c, run_case(c, DType::BF16, Device::cpu()), 1e-5, 1.0 / 256, label(c, DType::BF16));
    }
  }
}

TEST(AttentionWithCache, FirstPositionsAndAFullCache) {
  CacheCase c;
  c.B = 3, c.Tn = 4, c.cap = 8, c.starts = {0, 4, 2};  // a fresh row (a prompt), a row filled to the end
  expect_matches_reference(c, run_case(c, DType::F64, Device::cpu()), 1e-12, 1e-12, "edges");
}

// A finished row keeps its place in a batch: its new positions may run past the capacity. Those keys are
// dropped, the cache is not written out of bounds, and the queries that fit are still exact.
TEST(AttentionWithCache, PositionsPastTheCapacityAreDropped) {
  const int64_t B = 2, Tn = 3, H = 1, D = 4, cap = 5, C = H * D;
  const std::vector<double> qkv_v = normal_values(static_cast<size_t>(B * Tn * 3 * C), 3);
  const std::vector<double> cache_v = normal_values(static_cast<size_t>(B * H * cap * D), 4);
  Tensor k = Tensor::from_doubles(cache_v, {B, H, cap, D}, DType::F64);
  Tensor v = Tensor::from_doubles(cache_v, {B, H, cap, D}, DType::F64);
  NoGradGuard no_grad;
  const Tensor out =
      ops::attention_with_kv_cache(Tensor::from_doubles(qkv_v, {B, Tn, 3 * C}, DType::F64), k, v, Starts{3, 0}, 1);
  // Row 0 wrote positions 3 and 4 only; row 1 wrote 0..2.
  const std::vector<double> k_after = k.to_doubles();
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(k_after[static_cast<size_t>(3 * D + d)], qkv_v[static_cast<size_t>(C + d)]);
    EXPECT_EQ(k_after[static_cast<size_t>(4 * D + d)], qkv_v[static_cast<size_t>(3 * C + C + d)]);
    EXPECT_EQ(k_after[static_cast<size_t>(cap * D + d)], qkv_v[static_cast<size_t>(9 * C + C + d)]);
  }
  // Query 0 of row 0 (position 3) against float64 attention over keys 0..3.
  for (int64_t d = 0; d < D; ++d) {
    std::vector<double> p;
    double top = -INFINITY, total = 0, want = 0;
    for (int64_t j = 0; j <= 3; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < D; ++e)
        dot += qkv_v[static_cast<size_t>(e)] *
               (j < 3 ? cache_v[static_cast<size_t>(j * D + e)] : qkv_v[static_cast<size_t>(C + e)]);
      p.push_back(dot / 2.0);
      top = std::max(top, p.back());
    }
    for (auto& x : p) total += (x = std::exp(x - top));
    for (int64_t j = 0; j <= 3; ++j)
      want += p[static_cast<size_t>(j)] / total *
              (j < 3 ? cache_v[static_cast<size_t>(j * D + d)] : qkv_v[static_cast<size_t>(2 * C + d)]);
    EXPECT_NEAR(out.to_doubles()[static_cast<size_t>(d)], want, 1e-12);
  }
}

TEST(AttentionWithCache, Errors) {
  const int64_t B = 2, H = 2, D = 4, C = H * D, cap = 6;
  Tensor k = Tensor::zeros({B, H, cap, D}, DType::F32, Device::cpu());
  Tensor v = Tensor::zeros({B, H, cap, D}, DType::F32, Device::cpu());
  Tensor qkv = Tensor::zeros({B, 1, 3 * C}, DType::F32, Device::cpu());
  {
    // Inference only: no backward is recorded, so a graph that needs one is refused.
    Tensor leaf = Tensor::zeros({B, 1, 3 * C}, DType::F32, Device::cpu());
    leaf.set_requires_grad(true);
    const std::string message = testing::message_of([&] { ops::attention_with_kv_cache(leaf, k, v, Starts{0, 0}, H); });
    EXPECT_NE(message.find("inference only"), std::string::npos) << message;
    NoGradGuard no_grad;
    EXPECT_NO_THROW(ops::attention_with_kv_cache(leaf, k, v, Starts{0, 0}, H));
  }
  NoGradGuard no_grad;
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, v, Starts{0}, H), InputError);      // one start per row
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, v, Starts{0, 7}, H), InputError);   // past the cache
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, v, Starts{-1, 0}, H), InputError);  // negative
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, v, Starts{0, 0}, 4), Error);        // caches hold 2 heads
  Tensor wrong_batch = Tensor::zeros({B + 1, H, cap, D}, DType::F32, Device::cpu());
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, wrong_batch, v, Starts{0, 0}, H), Error);
  Tensor bf16_cache = Tensor::zeros({B, H, cap, D}, DType::BF16, Device::cpu());
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, bf16_cache, v, Starts{0, 0}, H), Error);  // dtype differs from qkv
  Tensor short_values = Tensor::zeros({B, H, cap - 1, D}, DType::F32, Device::cpu());
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, short_values, Starts{0, 0}, H), Error);
  Tensor not_packed = Tensor::zeros({B, 1, 3 * C + 1}, DType::F32, Device::cpu());
  EXPECT_THROW(ops::attention_with_kv_cache(not_packed, k, v, Starts{0, 0}, H), InputError);
  Tensor f32_starts = Tensor::zeros({B}, DType::F32, Device::cpu());
  EXPECT_THROW(ops::attention_with_kv_cache(qkv, k, v, f32_starts, H), Error);  // starts must be i32
}

}  // namespace
}  // namespace retort
