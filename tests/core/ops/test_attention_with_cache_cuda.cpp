// ops::attention_with_kv_cache on the GPU: both kernels (decode: few new queries per row; prefill: query tiles)
// against float64 attention written in the test and against the CPU op on the same inputs, in f32 and bf16, for
// head sizes that take the 16-byte vector path and the scalar one, up to the decode shape of generation (batch
// 32, a context of 1024) and a whole-context prefill. Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "tests/core/ops/attention_cache_test_support.h"

namespace retort {
namespace {

using namespace attention_cache_testing;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// f32: the kernels use the fast exponential (a few ulp) and sum in another order than the reference.
constexpr double kF32Abs = 2e-6, kF32Rel = 2e-5;
// bf16: the reference reads the rounded inputs, and the output is rounded once to 8 significant bits (half a
// unit of the last place is at most 2^-8 of the value); the f32 work before it adds far less.
constexpr double kBf16Abs = 1e-5, kBf16Rel = 1.0 / 256 + 1e-4;

void check_both_dtypes(const CacheCase& c) {
  const CacheRun gpu32 = run_case(c, DType::F32, Device::cuda(0));
  expect_matches_reference(c, gpu32, kF32Abs, kF32Rel, "cuda " + label(c, DType::F32));
  // The CPU op on the same inputs (the same seed draws the same values).
  const CacheRun cpu32 = run_case(c, DType::F32, Device::cpu());
  for (size_t i = 0; i < cpu32.out.size(); ++i)
    ASSERT_NEAR(gpu32.out[i], cpu32.out[i], kF32Abs + kF32Rel * std::abs(cpu32.out[i]))
        << "cuda vs cpu " << label(c, DType::F32) << " element " << i;
  EXPECT_EQ(gpu32.k_after, cpu32.k_after);
  EXPECT_EQ(gpu32.v_after, cpu32.v_after);
  expect_matches_reference(c, run_case(c, DType::BF16, Device::cuda(0)), kBf16Abs, kBf16Rel,
                           "cuda " + label(c, DType::BF16));
}

TEST(AttentionWithCacheCuda, DecodeMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  // 8..128: the vector path with 1 to 32 lanes per key; 48 and 80: lane groups rounded up to a power of two;
  // 20 (not a multiple of the f32 or bf16 vector) and 256 (above the f32 vector path): the scalar path.
  for (int64_t D : {8, 16, 20, 32, 48, 64, 80, 128, 256}) {
    for (int64_t Tn : {1, 3}) {
      CacheCase c;
      c.B = 5, c.Tn = Tn, c.H = 3, c.D = D, c.cap = 70, c.seed = static_cast<uint32_t>(D * 10 + Tn);
      check_both_dtypes(c);
    }
  }
}

TEST(AttentionWithCacheCuda, PrefillMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  // Tn > 4 takes the query-tile kernel for heads up to 128 and the decode kernel above.
  for (int64_t D : {8, 20, 64, 96, 128, 192}) {
    for (int64_t Tn : {5, 16, 17, 50}) {
      CacheCase c;
      c.B = 3, c.Tn = Tn, c.H = 2, c.D = D, c.cap = 120, c.seed = static_cast<uint32_t>(D * 100 + Tn);
      check_both_dtypes(c);
    }
  }
  // Prompts from the first position (no cached keys).
  CacheCase fresh;
  fresh.B = 2, fresh.Tn = 33, fresh.H = 2, fresh.D = 64, fresh.cap = 40, fresh.starts = {0, 0};
  check_both_dtypes(fresh);
}

TEST(AttentionWithCacheCuda, GenerationShapes) {
  SKIP_WITHOUT_GPU();
  // Decode at batch 32 over contexts up to 1024, head sizes 64 and 128; 2 heads (fewer blocks than an H100 has SMs:
  // the decode kernel's wide blocks) and 6 (more: its narrow ones).
  for (int64_t H : {2, 6}) {
    for (int64_t D : {64, 128}) {
      CacheCase c;
      c.B = 32, c.Tn = 1, c.H = H, c.D = D, c.cap = 1024, c.seed = static_cast<uint32_t>(D + H);
      for (int64_t b = 0; b < c.B; ++b) c.starts.push_back(b * 131 % 1000);
      c.starts.back() = 1023;  // the last position of the context
      check_both_dtypes(c);
    }
  }
  // A whole-context prompt.
  CacheCase prompt;
  prompt.B = 2, prompt.Tn = 1024, prompt.H = 2, prompt.D = 64, prompt.cap = 1024, prompt.starts = {0, 0};
  check_both_dtypes(prompt);
}

TEST(AttentionWithCacheCuda, PositionsPastTheCapacityAreDropped) {
  SKIP_WITHOUT_GPU();
  // Row 0's last new position lies past the cache: it is not written (the rest of the cache is compared exactly
  // with the CPU's, which drops it too) and the queries that fit are unaffected.
  for (int64_t Tn : {2, 9}) {
    CacheCase c;
    c.B = 2, c.Tn = Tn, c.H = 2, c.D = 64, c.cap = 20, c.starts = {20 - Tn + 1, 0};
    const CacheRun gpu = run_case(c, DType::F32, Device::cuda(0)), cpu = run_case(c, DType::F32, Device::cpu());
    EXPECT_EQ(gpu.k_after, cpu.k_after);
    EXPECT_EQ(gpu.v_after, cpu.v_after);
    const int64_t C = c.C();
    for (int64_t t = 0; t < Tn - 1; ++t)  // row 0's queries that fit
      for (int64_t i = 0; i < C; ++i) {
        const size_t at = static_cast<size_t>(t * C + i);
        ASSERT_NEAR(gpu.out[at], cpu.out[at], kF32Abs + kF32Rel * std::abs(cpu.out[at])) << "query " << t;
      }
  }
}

// Grouped-query heads in the decode kernel (which appends the new positions itself: the first query head of each
// key/value head writes them, every head reads them from the new rows): the GPU op against the CPU op on the same
// inputs, outputs within the f32 tolerance and the caches afterwards exactly, for groups of 2 and 4 and 1 or 3 new
// positions per row, one row ending past the cache.
TEST(AttentionWithCacheCuda, GroupedQueryDecodeEqualsTheCpu) {
  SKIP_WITHOUT_GPU();
  NoGradGuard no_grad;
  for (int64_t group : {2, 4}) {
    for (int64_t Tn : {1, 3}) {
      for (int64_t D : {20, 64}) {
        SCOPED_TRACE("group " + std::to_string(group) + ", Tn " + std::to_string(Tn) + ", D " + std::to_string(D));
        const int64_t B = 3, KV = 2, H = KV * group, cap = 40;
        const std::vector<int64_t> starts{5, 0, cap - Tn + (Tn > 1 ? 1 : 0)};
        const uint32_t seed = static_cast<uint32_t>(group * 100 + Tn * 10 + D);
        const auto make = [&](const Shape& shape, uint32_t salt) {
          return Tensor::from_doubles(normal_values(static_cast<size_t>(shape_numel(shape)), seed + salt), shape,
                                      DType::F64)
              .to(DType::F32);
        };
        const Tensor q = make({B, Tn, H * D}, 1), k = make({B, Tn, KV * D}, 2), v = make({B, Tn, KV * D}, 3);
        const Tensor k0 = make({B, KV, cap, D}, 4), v0 = make({B, KV, cap, D}, 5);
        Tensor kc_cpu = k0.clone(), vc_cpu = v0.clone();
        const Tensor out_cpu =
            ops::attention_with_kv_cache(q, k, v, kc_cpu, vc_cpu, starts, static_cast<int>(H), static_cast<int>(KV));
        const Device gpu = Device::cuda(0);
        Tensor kc_gpu = k0.to(gpu), vc_gpu = v0.to(gpu);
        const Tensor out_gpu = ops::attention_with_kv_cache(q.to(gpu), k.to(gpu), v.to(gpu), kc_gpu, vc_gpu, starts,
                                                            static_cast<int>(H), static_cast<int>(KV));
        const std::vector<double> want = out_cpu.to_doubles(), got = out_gpu.to_doubles();
        // Row 2's queries past the cache are not compared (their output is unspecified).
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < Tn; ++t) {
            if (starts[static_cast<size_t>(b)] + t >= cap) continue;
            for (int64_t i = 0; i < H * D; ++i) {
              const size_t at = static_cast<size_t>((b * Tn + t) * H * D + i);
              ASSERT_NEAR(got[at], want[at], kF32Abs + kF32Rel * std::abs(want[at])) << b << " " << t << " " << i;
            }
          }
        EXPECT_EQ(kc_gpu.to_doubles(), kc_cpu.to_doubles());
        EXPECT_EQ(vc_gpu.to_doubles(), vc_cpu.to_doubles());
      }
    }
  }
}

}  // namespace
}  // namespace retort
