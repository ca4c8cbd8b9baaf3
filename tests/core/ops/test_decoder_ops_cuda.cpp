// The decoder ops of Llama / Qwen models on the GPU against the CPU on the same stored inputs: causal attention
// with grouped-query heads (forward and all three gradients) for n_head / n_kv_head = 1, 2, 4 and every head size
// class (8 and 16 of the tiny test models, 64 and 128 of real ones, odd 7, 256 the largest), the cached attention
// (prefill, then decodes and a chunk) against the GPU's own full attention, SwiGLU with saturating gates, and the
// rotary embedding at far-apart positions with Llama 3 scaled frequencies. f32 within 2e-5 relative L2 error
// (float32 math summed in other orders), bf16 within 1e-2 (the GPU rounds its results to bf16; the CPU's float32
// results are not). Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "tests/core/ops/decoder_ops_test_support.h"
#include "tests/core/relative_error.h"

namespace retort {
namespace {

using namespace decoder_ops_testing;
using testing::relative_error;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

double bound(DType dtype) {
  return dtype == DType::F32 ? 2e-5 : 1e-2;
}

// The same stored values on another device, requiring a gradient.
Tensor leaf_on(const Tensor& t, Device device) {
  Tensor out = t.to(device);
  out.set_requires_grad();
  return out;
}

TEST(DecoderOpsCuda, GroupedQueryAttentionMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t B, T, H, KV, D;
  };
  const std::vector<Case> cases = {{2, 17, 4, 4, 8},   {2, 64, 4, 2, 16},  {2, 33, 4, 1, 64}, {1, 64, 8, 2, 128},
                                   {2, 5, 8, 8, 64},   {1, 40, 4, 2, 256}, {2, 9, 6, 3, 7},   {1, 1, 4, 1, 128},
                                   {1, 130, 8, 1, 64}, {3, 64, 16, 4, 128}};
  for (const Case& c : cases) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(fmt::format("B {} T {} H {} KV {} D {} {}", c.B, c.T, c.H, c.KV, c.D, dtype_name(dtype)));
      const uint32_t seed = static_cast<uint32_t>(c.T * 100 + c.D + c.KV);
      const Tensor q = normal_tensor({c.B, c.T, c.H * c.D}, seed, dtype);
      const Tensor k = normal_tensor({c.B, c.T, c.KV * c.D}, seed + 1, dtype);
      const Tensor v = normal_tensor({c.B, c.T, c.KV * c.D}, seed + 2, dtype);
      const Tensor dout = normal_tensor({c.B, c.T, c.H * c.D}, seed + 3, dtype);
      std::vector<Tensor> results[2];
      for (int side = 0; side < 2; ++side) {
        const Device device = side == 0 ? Device::cpu() : Device::cuda(0);
        Tensor qd = leaf_on(q, device), kd = leaf_on(k, device), vd = leaf_on(v, device);
        Tensor out = ops::causal_attention(qd, kd, vd, static_cast<int>(c.H), static_cast<int>(c.KV));
        ASSERT_EQ(out.device(), device);
        out.backward(dout.to(device));
        results[side] = {out.to(Device::cpu()), qd.grad().to(Device::cpu()), kd.grad().to(Device::cpu()),
                         vd.grad().to(Device::cpu())};
      }
      const char* names[] = {"output", "dq", "dk", "dv"};
      for (int i = 0; i < 4; ++i) EXPECT_LT(relative_error(results[1][i], results[0][i]), bound(dtype)) << names[i];
      // The GPU's f32 output also against float64 attention written in the test.
      if (dtype == DType::F32) {
        const std::vector<double> ref =
            attention_reference(q.to_doubles(), k.to_doubles(), v.to_doubles(), c.B, c.T, c.H, c.KV, c.D);
        EXPECT_LT(scaled_max_error(results[1][0].to_doubles(), ref), 2e-5);
      }
    }
  }
}

TEST(DecoderOpsCuda, PackedSelfAttentionStillMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 33, H = 3, D = 16;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    const Tensor qkv = normal_tensor({B, T, 3 * H * D}, 61, dtype);
    const Tensor dout = normal_tensor({B, T, H * D}, 62, dtype);
    Tensor cpu = leaf_on(qkv, Device::cpu()), gpu = leaf_on(qkv, Device::cuda(0));
    Tensor out_cpu = ops::causal_self_attention(cpu, static_cast<int>(H)),
           out_gpu = ops::causal_self_attention(gpu, static_cast<int>(H));
    out_cpu.backward(dout);
    out_gpu.backward(dout.to(Device::cuda(0)));
    EXPECT_LT(relative_error(out_gpu.to(Device::cpu()), out_cpu), bound(dtype)) << dtype_name(dtype);
    EXPECT_LT(relative_error(gpu.grad().to(Device::cpu()), cpu.grad()), bound(dtype)) << dtype_name(dtype);
  }
}

TEST(DecoderOpsCuda, CachedGroupedQueryAttentionEqualsTheFullAttention) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t H, KV, D;
  };
  const int64_t B = 3, T = 40, cap = 48;
  // Steps: a prompt of 21 (the prefill kernel), one-token decodes, a chunk of 3 (decode kernel), 4 more decodes,
  // then a chunk of 9 (prefill kernel again).
  const std::vector<int64_t> steps = {21, 1, 1, 1, 3, 1, 1, 1, 1, 9};
  for (const Case c : {Case{4, 4, 8}, Case{4, 2, 16}, Case{8, 2, 64}, Case{8, 1, 128}, Case{4, 2, 256}}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(fmt::format("H {} KV {} D {} {}", c.H, c.KV, c.D, dtype_name(dtype)));
      const Device gpu = Device::cuda(0);
      const Tensor q = normal_tensor({B, T, c.H * c.D}, 71, dtype, gpu);
      const Tensor k = normal_tensor({B, T, c.KV * c.D}, 72, dtype, gpu);
      const Tensor v = normal_tensor({B, T, c.KV * c.D}, 73, dtype, gpu);
      const CachedRun gpu_run = run_cached(q, k, v, c.H, c.KV, cap, steps);
      const CachedRun cpu_run =
          run_cached(q.to(Device::cpu()), k.to(Device::cpu()), v.to(Device::cpu()), c.H, c.KV, cap, steps);
      const Shape out_shape{B, T, c.H * c.D};
      const Tensor gpu_out = Tensor::from_doubles(gpu_run.out, out_shape, DType::F64);
      EXPECT_LT(relative_error(gpu_out, Tensor::from_doubles(cpu_run.out, out_shape, DType::F64)), bound(dtype));
      // The keys and values are copied, so the caches agree exactly.
      EXPECT_EQ(gpu_run.k_cache, cpu_run.k_cache);
      EXPECT_EQ(gpu_run.v_cache, cpu_run.v_cache);
      if (dtype == DType::F32) {
        const std::vector<double> ref =
            attention_reference(q.to_doubles(), k.to_doubles(), v.to_doubles(), B, T, c.H, c.KV, c.D);
        EXPECT_LT(scaled_max_error(gpu_run.out, ref), 2e-5);
      }
    }
  }
}

TEST(DecoderOpsCuda, SwigluMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const int64_t n : {1, 7, 1000, 37 * 1023}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(fmt::format("n {} {}", n, dtype_name(dtype)));
      const Tensor gate = normal_tensor({n}, 81, dtype, Device::cpu(), 6.0);
      const Tensor up = normal_tensor({n}, 82, dtype);
      const Tensor dout = normal_tensor({n}, 83, dtype);
      std::vector<Tensor> results[2];
      for (int side = 0; side < 2; ++side) {
        const Device device = side == 0 ? Device::cpu() : Device::cuda(0);
        Tensor g = leaf_on(gate, device), u = leaf_on(up, device);
        Tensor out = ops::swiglu(g, u);
        out.backward(dout.to(device));
        results[side] = {out.to(Device::cpu()), g.grad().to(Device::cpu()), u.grad().to(Device::cpu())};
      }
      for (int i = 0; i < 3; ++i) EXPECT_LT(relative_error(results[1][i], results[0][i]), bound(dtype)) << i;
    }
  }
}

TEST(DecoderOpsCuda, RotaryEmbeddingMatchesTheCpuAtFarApartPositions) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 6, heads = 4, head_dim = 128;
  const std::vector<int32_t> positions = {0, 1, 2, 7, 4095, 8191, 100, 101, 65535, 70000, 131071, 3};
  const std::vector<float> inv_freq = llama3_inv_freq(head_dim, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = normal_tensor({B, T, heads * head_dim}, 91, dtype);
    const Tensor dout = normal_tensor({B, T, heads * head_dim}, 92, dtype);
    std::vector<Tensor> results[2];
    for (int side = 0; side < 2; ++side) {
      const Device device = side == 0 ? Device::cpu() : Device::cuda(0);
      Tensor xd = leaf_on(x, device);
      Tensor out = ops::rotary_embedding(xd, Tensor::from_ints(positions, {B, T}, device),
                                         Tensor::from_floats(inv_freq, {head_dim / 2}, DType::F32, device), head_dim);
      out.backward(dout.to(device));
      results[side] = {out.to(Device::cpu()), xd.grad().to(Device::cpu())};
    }
    EXPECT_LT(relative_error(results[1][0], results[0][0]), bound(dtype)) << "output";
    EXPECT_LT(relative_error(results[1][1], results[0][1]), bound(dtype)) << "gradient";
    if (dtype == DType::F32) {
      const std::vector<double> ref = rotary_reference(x.to_doubles(), positions, inv_freq, head_dim, heads * head_dim);
      EXPECT_LT(scaled_max_error(results[1][0].to_doubles(), ref), 1e-6);
    }
  }
}

}  // namespace
}  // namespace retort
