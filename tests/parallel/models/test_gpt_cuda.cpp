// The GPT on the GPU against the same GPT on the CPU: same seed, same weights (bit for bit), same logits,
// loss and gradients within float32 tolerance; bf16 compute within bf16 tolerance. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "losses/cross_entropy.h"
#include "parallel/models/gpt_model.h"

namespace retort {
namespace {

double relative_error(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

GptConfig tiny_config() {
  GptConfig c;
  c.vocab_size = 211;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  return c;
}

Tensor tiny_ids(int64_t B, int64_t T, int64_t vocab, uint32_t salt) {
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + salt * 11 + i * i) % vocab);
  return Tensor::from_ints(ids, {B, T});
}

TEST(GptCuda, SameSeedGivesBitIdenticalWeightsOnCpuAndGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel cpu(tiny_config()), gpu(tiny_config());
  gpu.to(Device::cuda(0));
  cpu.initialize(99);
  gpu.initialize(99);
  const auto a = cpu.named_parameters(), b = gpu.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].second.device().is_cuda());
    EXPECT_EQ(a[i].second.to_floats(), b[i].second.to_floats()) << a[i].first;
  }
}

TEST(GptCuda, ForwardBackwardMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (bool tie : {true, false}) {
    GptConfig config = tiny_config();
    config.tie_weights = tie;
    GptModel cpu(config), gpu(config);
    cpu.initialize(5);
    gpu.initialize(5);
    gpu.to(Device::cuda(0));
    const Tensor ids = tiny_ids(3, 19, config.vocab_size, 1), targets = tiny_ids(3, 19, config.vocab_size, 2);
    Tensor cpu_logits = cpu.forward(ids), gpu_logits = gpu.forward(ids.to(Device::cuda(0)));
    EXPECT_LT(relative_error(gpu_logits, cpu_logits), 1e-5) << "tie " << tie;
    Tensor cpu_loss = losses::cross_entropy(cpu_logits, targets),
           gpu_loss = losses::cross_entropy(gpu_logits, targets.to(Device::cuda(0)));
    EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 1e-5 * std::abs(cpu_loss.item()));
    cpu_loss.backward();
    gpu_loss.backward();
    const auto a = cpu.named_parameters(), b = gpu.named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(relative_error(b[i].second.grad(), a[i].second.grad()), 1e-4) << a[i].first << " tie " << tie;
  }
}

TEST(GptCuda, Bf16ComputeStaysCloseToFloat32) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel model(tiny_config());
  model.initialize(3);
  model.to(Device::cuda(0));
  const Tensor ids = tiny_ids(2, 24, 211, 3).to(Device::cuda(0));
  const Tensor targets = tiny_ids(2, 24, 211, 4).to(Device::cuda(0));
  Tensor loss32 = losses::cross_entropy(model.forward(ids, DType::F32), targets);
  loss32.backward();
  std::vector<Tensor> grads32;
  for (auto& p : model.parameters()) grads32.push_back(p.grad().clone());
  model.zero_grad();
  Tensor logits16 = model.forward(ids, DType::BF16);
  EXPECT_EQ(logits16.dtype(), DType::BF16);
  Tensor loss16 = losses::cross_entropy(logits16, targets);
  EXPECT_NEAR(loss16.item(), loss32.item(), 2e-2 * loss32.item());
  loss16.backward();
  const auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().dtype(), DType::F32) << "master gradients stay float32";
    EXPECT_LT(relative_error(params[i].grad(), grads32[i]), 5e-2) << i;
  }
}

}  // namespace
}  // namespace retort
