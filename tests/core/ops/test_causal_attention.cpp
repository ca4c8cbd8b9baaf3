// ops::causal_attention (separate q, k, v with grouped-query heads) on the CPU: against attention written in
// float64 for n_head / n_kv_head = 1, 2, 4 and 8, head sizes 8 to 128 and T up to 64, in f64, f32 and bf16;
// gradients against finite differences; GQA equal to multi-head attention on repeated key/value heads (outputs and
// gradients, the key/value gradients summed over each group); the packed-qkv causal_self_attention equal, bit for
// bit, to this op on the split projections; bad head counts.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/core/ops/decoder_ops_test_support.h"

namespace retort {
namespace {

using namespace decoder_ops_testing;

struct Heads {
  int64_t n_head, n_kv_head;
};

// [B, T, KV * D] -> [B, T, H * D] with each key/value head repeated for the query heads of its group.
Tensor repeat_kv(const Tensor& x, int64_t H, int64_t KV, int64_t D) {
  const std::vector<double> v = x.to_doubles();
  const int64_t rows = x.size(0) * x.size(1);
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) out.push_back(v[static_cast<size_t>(r * KV * D + (h / (H / KV)) * D + d)]);
  return Tensor::from_doubles(out, {x.size(0), x.size(1), H * D}, DType::F64).to(x.dtype());
}

// Sums a repeated-head gradient [B, T, H * D] back over each group -> [B, T, KV * D].
std::vector<double> sum_groups(const Tensor& g, int64_t H, int64_t KV, int64_t D) {
  const std::vector<double> v = g.to_doubles();
  const int64_t rows = g.size(0) * g.size(1);
  std::vector<double> out(static_cast<size_t>(rows * KV * D), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        out[static_cast<size_t>(r * KV * D + (h / (H / KV)) * D + d)] += v[static_cast<size_t>(r * H * D + h * D + d)];
  return out;
}

TEST(CausalAttention, MatchesFloat64AttentionWithGroupedHeads) {
  const int64_t B = 2;
  for (const Heads heads : {Heads{4, 4}, Heads{4, 2}, Heads{4, 1}, Heads{8, 2}, Heads{8, 1}}) {
    for (const int64_t D : {8, 16, 64, 128}) {
      for (const int64_t T : {1, 17, 64}) {
        const int64_t H = heads.n_head, KV = heads.n_kv_head;
        const uint32_t seed = static_cast<uint32_t>(H * 1000 + KV * 100 + D + T);
        const std::string what = fmt::format("H {} KV {} D {} T {}", H, KV, D, T);
        const Tensor q = normal_tensor({B, T, H * D}, seed, DType::F64);
        const Tensor k = normal_tensor({B, T, KV * D}, seed + 1, DType::F64);
        const Tensor v = normal_tensor({B, T, KV * D}, seed + 2, DType::F64);
        struct Case {
          DType dtype;
          double tolerance;  // of max |out - ref| / max |ref|
        };
        // f32: float32 scores and sums over at most 64 keys of unit-scale values; bf16: the output rounded once
        // to 8 significant bits after float32 work on the rounded inputs.
        for (const Case& c : {Case{DType::F64, 1e-12}, Case{DType::F32, 2e-5}, Case{DType::BF16, 1.0 / 128}}) {
          const Tensor qc = q.to(c.dtype), kc = k.to(c.dtype), vc = v.to(c.dtype);
          const Tensor out = ops::causal_attention(qc, kc, vc, static_cast<int>(H), static_cast<int>(KV));
          ASSERT_EQ(out.shape(), Shape({B, T, H * D}));
          ASSERT_EQ(out.dtype(), c.dtype);
          const std::vector<double> ref =
              attention_reference(qc.to_doubles(), kc.to_doubles(), vc.to_doubles(), B, T, H, KV, D);
          EXPECT_LT(scaled_max_error(out.to_doubles(), ref), c.tolerance) << what << " " << dtype_name(c.dtype);
        }
      }
    }
  }
}

TEST(CausalAttention, GradientsMatchFiniteDifferences) {
  for (const Heads heads : {Heads{2, 2}, Heads{4, 2}, Heads{4, 1}}) {
    const int64_t B = 2, T = 5, D = 3, H = heads.n_head, KV = heads.n_kv_head;
    std::mt19937_64 rng(static_cast<uint64_t>(H * 10 + KV));
    Tensor q = testing::random_tensor({B, T, H * D}, rng);
    Tensor k = testing::random_tensor({B, T, KV * D}, rng);
    Tensor v = testing::random_tensor({B, T, KV * D}, rng);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
    SCOPED_TRACE(fmt::format("H {} KV {}", H, KV));
    testing::expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return ops::causal_attention(in[0], in[1], in[2], static_cast<int>(H), static_cast<int>(KV));
        },
        {q, k, v});
  }
}

TEST(CausalAttention, GroupedHeadsEqualMultiHeadAttentionOnRepeatedKeysAndValues) {
  const int64_t B = 2, T = 13, D = 16;
  for (const Heads heads : {Heads{4, 2}, Heads{4, 1}, Heads{6, 3}}) {
    for (const DType dtype : {DType::F64, DType::F32}) {
      const int64_t H = heads.n_head, KV = heads.n_kv_head;
      SCOPED_TRACE(fmt::format("H {} KV {} {}", H, KV, dtype_name(dtype)));
      Tensor q = normal_tensor({B, T, H * D}, 21, dtype);
      Tensor k = normal_tensor({B, T, KV * D}, 22, dtype);
      Tensor v = normal_tensor({B, T, KV * D}, 23, dtype);
      Tensor q2 = q.clone(), k_rep = repeat_kv(k, H, KV, D), v_rep = repeat_kv(v, H, KV, D);
      for (Tensor* t : {&q, &k, &v, &q2, &k_rep, &v_rep}) t->set_requires_grad();
      const Tensor dout = normal_tensor({B, T, H * D}, 24, dtype);
      Tensor gqa = ops::causal_attention(q, k, v, static_cast<int>(H), static_cast<int>(KV));
      Tensor mha = ops::causal_attention(q2, k_rep, v_rep, static_cast<int>(H), static_cast<int>(H));
      gqa.backward(dout);
      mha.backward(dout);
      // The forward reads the same numbers in the same order: equal bit for bit.
      EXPECT_EQ(gqa.to_doubles(), mha.to_doubles());
      EXPECT_EQ(q.grad().to_doubles(), q2.grad().to_doubles());
      // Key and value gradients: the group's sum, added in another order than sum_groups does.
      const double tol = dtype == DType::F64 ? 1e-13 : 1e-6;
      EXPECT_LT(scaled_max_error(k.grad().to_doubles(), sum_groups(k_rep.grad(), H, KV, D)), tol);
      EXPECT_LT(scaled_max_error(v.grad().to_doubles(), sum_groups(v_rep.grad(), H, KV, D)), tol);
    }
  }
}

// [B, T, 3C] -> one of its thirds, [B, T, C].
Tensor third(const Tensor& qkv, int which) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const std::vector<double> v = qkv.to_doubles();
  std::vector<double> out;
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) out.push_back(v[static_cast<size_t>(r * 3 * C + which * C + c)]);
  return Tensor::from_doubles(out, {B, T, C}, DType::F64).to(qkv.dtype());
}

TEST(CausalAttention, PackedSelfAttentionIsTheSameComputation) {
  const int64_t B = 2, T = 9, H = 3, D = 8, C = H * D;
  for (const DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor qkv = normal_tensor({B, T, 3 * C}, 31, dtype);
    Tensor q = third(qkv, 0), k = third(qkv, 1), v = third(qkv, 2);
    for (Tensor* t : {&qkv, &q, &k, &v}) t->set_requires_grad();
    const Tensor dout = normal_tensor({B, T, C}, 32, dtype);
    Tensor packed = ops::causal_self_attention(qkv, static_cast<int>(H));
    Tensor split = ops::causal_attention(q, k, v, static_cast<int>(H), static_cast<int>(H));
    packed.backward(dout);
    split.backward(dout);
    EXPECT_EQ(packed.to_doubles(), split.to_doubles());
    for (int part = 0; part < 3; ++part)
      EXPECT_EQ(third(qkv.grad(), part).to_doubles(), (part == 0   ? q
                                                       : part == 1 ? k
                                                                   : v)
                                                          .grad()
                                                          .to_doubles())
          << "gradient of part " << part;
  }
}

TEST(CausalAttention, HeadCountsThatDoNotGroupAreRejected) {
  const Tensor q = Tensor::zeros({1, 2, 12}), kv = Tensor::zeros({1, 2, 8});
  EXPECT_THROW(ops::causal_attention(q, kv, kv, 3, 2), InputError);  // 3 query heads, 2 kv heads
  EXPECT_THROW(ops::causal_attention(q, kv, kv, 5, 1), InputError);  // 12 is not 5 * D
  EXPECT_THROW(ops::causal_attention(q, Tensor::zeros({1, 2, 6}), Tensor::zeros({1, 2, 6}), 6, 2),
               InputError);  // D = 2 needs k of width 4
  try {
    ops::causal_attention(q, kv, kv, 3, 2);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of n_kv_head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace retort
