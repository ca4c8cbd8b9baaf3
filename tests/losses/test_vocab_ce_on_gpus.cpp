// The fused CUDA cross-entropy against the CPU path: one GPU (tp 1) and two GPUs over NCCL (tp 2, thread
// ranks), f32 and bf16 logits, label smoothing and z-loss, masked rows. Skipped without GPUs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "core/tensor/device.h"
#include "core/tensor/slicing.h"
#include "losses/cross_entropy.h"
#include "parallel/comm/thread_ranks.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::losses {
namespace {

struct Case {
  Tensor logits;  // CPU, [rows, vocab]
  Tensor targets;
};

Case make_case(int64_t rows, int64_t vocab, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> x(static_cast<size_t>(rows * vocab));
  for (auto& v : x) v = normal(gen);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) t[i] = i % 7 == 3 ? -100 : static_cast<int32_t>((i * 7919) % vocab);
  return {Tensor::from_doubles(x, {rows, vocab}, dtype), Tensor::from_ints(t, {rows})};
}

CrossEntropyOptions options_with(double smoothing, double z) {
  CrossEntropyOptions o;
  o.label_smoothing = smoothing;
  o.z_loss = z;
  return o;
}

double max_rel(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double scale = 1e-30, worst = 0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / scale);
  return worst;
}

TEST(VocabCrossEntropyGpu, OneGpuMatchesTheCpuPath) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t vocab : {37, 1000, 32771}) {
      for (auto [smoothing, z] : {std::pair{0.0, 0.0}, {0.1, 1e-3}}) {
        SCOPED_TRACE(fmt::format("{} V{} smoothing {} z {}", dtype_name(dtype), vocab, smoothing, z));
        const Case c = make_case(64, vocab, dtype, static_cast<uint32_t>(vocab));
        Tensor cpu_logits = c.logits.clone().set_requires_grad();
        Tensor gpu_logits = c.logits.to(Device::cuda(0)).set_requires_grad();
        Tensor cpu_loss = cross_entropy(cpu_logits, c.targets, options_with(smoothing, z));
        Tensor gpu_loss = cross_entropy(gpu_logits, c.targets.to(Device::cuda(0)), options_with(smoothing, z));
        EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 1e-5 * std::abs(cpu_loss.item()));
        cpu_loss.backward();
        gpu_loss.backward();
        // f32: S sums 32k exponentials in another order on each side (~sqrt(V) ulp); bf16: one rounding of the grad.
        EXPECT_LE(max_rel(gpu_logits.grad(), cpu_logits.grad()), dtype == DType::BF16 ? 1e-2 : 4e-5);
      }
    }
  }
}

TEST(VocabCrossEntropyGpu, TwoGpusOverNcclMatchTheCpuPath) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  const int64_t rows = 96, vocab = 2 * 4099;
  const Case c = make_case(rows, vocab, DType::F32, 11);
  Tensor full = c.logits.clone().set_requires_grad();
  Tensor ref = cross_entropy(full, c.targets, options_with(0.1, 1e-4));
  ref.backward();
  run_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo->rank();
    const Device gpu = Device::cuda(rank);
    auto nccl = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
    Tensor local = narrow_copy(c.logits, 1, rank * vocab / 2, vocab / 2).to(gpu).set_requires_grad();
    local.set_sharding({1, 1, nccl});
    Tensor loss = cross_entropy(local, c.targets.to(gpu), options_with(0.1, 1e-4));
    EXPECT_NEAR(loss.item(), ref.item(), 1e-5 * std::abs(ref.item()));
    loss.backward();
    EXPECT_LE(max_rel(local.grad(), narrow_copy(full.grad(), 1, rank * vocab / 2, vocab / 2)), 1e-5);
  });
#endif
}

}  // namespace
}  // namespace retort::losses
