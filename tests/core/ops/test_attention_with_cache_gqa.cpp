// ops::attention_with_kv_cache with separate q, k, v and grouped-query heads on the CPU: a prefill and then
// one-token decodes (and a chunk of several positions) give the rows of the full causal attention, and the caches
// hold the keys and values per key/value head; the packed-qkv overload is the same computation; bad arguments.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "tests/core/ops/decoder_ops_test_support.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using namespace decoder_ops_testing;

TEST(AttentionWithCacheGqa, PrefillThenDecodesEqualTheFullCausalAttention) {
  const int64_t B = 3, T = 12, cap = 16;
  struct Case {
    int64_t H, KV, D;
  };
  for (const Case c : {Case{4, 4, 8}, Case{4, 2, 16}, Case{4, 1, 8}, Case{8, 2, 64}}) {
    for (const DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE(fmt::format("H {} KV {} D {} {}", c.H, c.KV, c.D, dtype_name(dtype)));
      const Tensor q = normal_tensor({B, T, c.H * c.D}, 41, dtype);
      const Tensor k = normal_tensor({B, T, c.KV * c.D}, 42, dtype);
      const Tensor v = normal_tensor({B, T, c.KV * c.D}, 43, dtype);
      // A prompt of 5, three decodes, a chunk of 3, one more decode.
      const CachedRun run = run_cached(q, k, v, c.H, c.KV, cap, {5, 1, 1, 1, 3, 1});
      const Tensor full = ops::causal_attention(q, k, v, static_cast<int>(c.H), static_cast<int>(c.KV));
      EXPECT_LT(scaled_max_error(run.out, full.to_doubles()), dtype == DType::F64 ? 1e-13 : 1e-6);
      // The caches: key/value head j of position t at [b, j, t, :]; zeros past T.
      const std::vector<double> ks = k.to_doubles();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < c.KV; ++j)
          for (int64_t t = 0; t < cap; ++t)
            for (int64_t d = 0; d < c.D; ++d) {
              const double want = t < T ? ks[static_cast<size_t>((b * T + t) * c.KV * c.D + j * c.D + d)] : 0.0;
              ASSERT_EQ(run.k_cache[static_cast<size_t>(((b * c.KV + j) * cap + t) * c.D + d)], want)
                  << "row " << b << " head " << j << " position " << t;
            }
    }
  }
}

TEST(AttentionWithCacheGqa, PackedOverloadIsTheSameComputation) {
  const int64_t B = 2, Tn = 3, H = 2, D = 8, C = H * D, cap = 10;
  const Tensor qkv = normal_tensor({B, Tn, 3 * C}, 51, DType::F32);
  const std::vector<double> all = qkv.to_doubles();
  auto part = [&](int which) {
    std::vector<double> out;
    for (int64_t r = 0; r < B * Tn; ++r)
      for (int64_t c = 0; c < C; ++c) out.push_back(all[static_cast<size_t>(r * 3 * C + which * C + c)]);
    return Tensor::from_doubles(out, {B, Tn, C}, DType::F32);
  };
  const Tensor k0 = normal_tensor({B, H, cap, D}, 52, DType::F32), v0 = normal_tensor({B, H, cap, D}, 53, DType::F32);
  Tensor k1 = k0.clone(), v1 = v0.clone(), k2 = k0.clone(), v2 = v0.clone();
  NoGradGuard no_grad;
  const std::vector<int64_t> starts = {4, 7};
  const Tensor packed = ops::attention_with_kv_cache(qkv, k1, v1, starts, static_cast<int>(H));
  const Tensor split =
      ops::attention_with_kv_cache(part(0), part(1), part(2), k2, v2, starts, static_cast<int>(H), static_cast<int>(H));
  EXPECT_EQ(packed.to_doubles(), split.to_doubles());
  EXPECT_EQ(k1.to_doubles(), k2.to_doubles());
  EXPECT_EQ(v1.to_doubles(), v2.to_doubles());
}

TEST(AttentionWithCacheGqa, Errors) {
  const int64_t B = 2, H = 4, KV = 2, D = 4, cap = 6;
  Tensor k_cache = Tensor::zeros({B, KV, cap, D}), v_cache = Tensor::zeros({B, KV, cap, D});
  const Tensor q = Tensor::zeros({B, 1, H * D}), kv = Tensor::zeros({B, 1, KV * D});
  using Starts = std::vector<int64_t>;
  {
    Tensor leaf = q.clone();
    leaf.set_requires_grad(true);
    const std::string message = testing::message_of([&] {
      ops::attention_with_kv_cache(leaf, kv, kv, k_cache, v_cache, Starts{0, 0}, H, KV);
    });
    EXPECT_NE(message.find("inference only"), std::string::npos) << message;
  }
  NoGradGuard no_grad;
  EXPECT_NO_THROW(ops::attention_with_kv_cache(q, kv, kv, k_cache, v_cache, Starts{0, 0}, H, KV));
  EXPECT_THROW(ops::attention_with_kv_cache(q, kv, kv, k_cache, v_cache, Starts{0, 0}, H, 3), InputError);
  EXPECT_THROW(ops::attention_with_kv_cache(q, q, q, k_cache, v_cache, Starts{0, 0}, H, KV), InputError);
  EXPECT_THROW(ops::attention_with_kv_cache(q, kv, kv, k_cache, v_cache, Starts{0, 9}, H, KV), InputError);
  EXPECT_THROW(ops::attention_with_kv_cache(q, kv, kv, k_cache, v_cache, Starts{0}, H, KV), InputError);
  Tensor mha_cache = Tensor::zeros({B, H, cap, D});  // caches hold the key/value heads, not the query heads
  EXPECT_THROW(ops::attention_with_kv_cache(q, kv, kv, mha_cache, mha_cache, Starts{0, 0}, H, KV), Error);
}

}  // namespace
}  // namespace retort
