// The GPT's cached forward on the GPU: the generation script against the float64 full forward (f32 and bf16),
// the generation shapes (batch 32, prompts up to a context of 1024, head sizes 64 and 128) against the CPU's
// cached forward, and tp 2 over NCCL. Skipped without a GPU (two for NCCL).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/generate/kv_cache_test_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort {
namespace {

using namespace kv_cache_testing;

TEST(GptKvCacheCuda, CachedLogitsEqualTheFullForwardInF32AndBf16) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (bool tied : {true, false}) {
    GptConfig config = small_config();
    config.tie_weights = tied;
    GptModel dense(config), model(config);
    dense.initialize(7);
    model.initialize(7);
    model.to(Device::cuda(0));
    // cuBLAS in f32 (no TF32) and the kernels' fast exponential against float64.
    check_cached_against_full(model, dense, DType::F32, Device::cuda(0), 5e-5, tied ? "f32 tied" : "f32 untied");
    // As on the CPU (test_kv_cache.cpp): about ten roundings to 8 significant bits between ids and logits.
    check_cached_against_full(model, dense, DType::BF16, Device::cuda(0), 6e-2, tied ? "bf16 tied" : "bf16 untied");
  }
}

// sqrt(sum (a - b)^2 / sum b^2)
double relative_rms(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Batch 32, right-padded prompts of 1 to 1021 tokens (one row fills the 1024-position context after the three
// decode steps), rows sitting out some steps: the GPU's logits after every call against the CPU's cached
// forward from the same seed (which test_kv_cache.cpp ties to the full forward).
void check_generation_shapes(int n_head) {
  GptConfig config;
  config.vocab_size = 512;
  config.block_size = 1024;
  config.n_layer = 2;
  config.n_head = n_head;
  config.n_embd = 256;
  config.init_std = 0.1;  // attention far from uniform, so that a wrong key or position shows
  GptModel cpu_model(config), gpu_model(config);
  cpu_model.initialize(11);
  gpu_model.initialize(11);
  gpu_model.to(Device::cuda(0));
  const int64_t B = 32, width = 1021, steps = 3, V = config.vocab_size;
  std::vector<int64_t> lengths;
  std::vector<int32_t> ids(static_cast<size_t>(B * width), 0);
  for (int64_t b = 0; b < B; ++b) {
    lengths.push_back(b == B - 1 ? width : 1 + (b * 97) % 1000);
    for (int64_t t = 0; t < lengths.back(); ++t)
      ids[static_cast<size_t>(b * width + t)] = static_cast<int32_t>((b * 131 + t * 29 + t * t) % V);
  }
  generate::KvCache cpu_cache(cpu_model, B, config.block_size, DType::F32, Device::cpu());
  generate::KvCache gpu_cache(gpu_model, B, config.block_size, DType::F32, Device::cuda(0));
  generate::KvCache bf16_cache(gpu_model, B, config.block_size, DType::BF16, Device::cuda(0));
  std::vector<int32_t> call_ids = ids;
  std::vector<int64_t> valid = lengths;
  int64_t T = width;
  for (int64_t call = 0; call <= steps; ++call) {
    const std::string what = "n_head " + std::to_string(n_head) + " call " + std::to_string(call);
    const Tensor host_ids = Tensor::from_ints(call_ids, {B, T});
    const std::vector<double> want = cpu_model.forward_cached(host_ids, valid, cpu_cache).to_doubles();
    const std::vector<double> got =
        gpu_model.forward_cached(host_ids.to(Device::cuda(0)), valid, gpu_cache, DType::F32).to_doubles();
    const std::vector<double> got_bf16 =
        gpu_model.forward_cached(host_ids.to(Device::cuda(0)), valid, bf16_cache, DType::BF16).to_doubles();
    for (int64_t b = 0; b < B; ++b) {
      if (valid[static_cast<size_t>(b)] == 0) continue;
      const auto row = [&](const std::vector<double>& x) {
        return std::vector<double>(x.begin() + b * V, x.begin() + (b + 1) * V);
      };
      // f32 on both sides, summed in other orders over contexts of up to 1024 keys.
      for (int64_t v = 0; v < V; ++v) {
        const double w = want[static_cast<size_t>(b * V + v)];
        ASSERT_NEAR(got[static_cast<size_t>(b * V + v)], w, 2e-4 * (1 + std::abs(w))) << what << " row " << b;
      }
      // bf16: rounding to 8 significant bits at every layer, about 1% of the logits' scale; a wrong key or
      // position moves them by tens of percent.
      EXPECT_LT(relative_rms(row(got_bf16), row(want)), 3e-2) << what << " row " << b << " (bf16)";
    }
    EXPECT_EQ(gpu_cache.lengths(), cpu_cache.lengths());
    // Next: one token per row; every fifth row sits out the second step.
    T = 1;
    call_ids.assign(static_cast<size_t>(B), 0);
    for (int64_t b = 0; b < B; ++b) {
      call_ids[static_cast<size_t>(b)] = static_cast<int32_t>((b * 7 + call * 3 + 1) % V);
      valid[static_cast<size_t>(b)] = (call == 1 && b % 5 == 0 && b != B - 1) ? 0 : 1;
    }
  }
  EXPECT_EQ(gpu_cache.length(B - 1), config.block_size);
}

TEST(GptKvCacheCuda, GenerationShapesAgainstTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_generation_shapes(4);  // head_dim 64
  check_generation_shapes(2);  // head_dim 128
}

TEST(GptKvCacheCuda, TwoGpusOverNcclHoldTheirSlicesOfTheDenseLogits) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  for (bool tied : {true, false}) {
    GptConfig config = small_config();
    config.tie_weights = tied;
    GptModel dense(config);
    dense.initialize(7);
    comm_testing::on_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
      const int rank = gloo->rank();
      const Device gpu = Device::cuda(rank);
      auto nccl = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
      GptModel model(config, nccl);
      model.initialize(7);
      model.to(gpu);
      check_cached_against_full(model, dense, DType::F32, gpu, 5e-5,
                                "nccl rank " + std::to_string(rank) + (tied ? " tied" : " untied"));
      check_cached_against_full(model, dense, DType::BF16, gpu, 6e-2,
                                "nccl bf16 rank " + std::to_string(rank) + (tied ? " tied" : " untied"));
    });
  }
#endif
}

}  // namespace
}  // namespace retort
