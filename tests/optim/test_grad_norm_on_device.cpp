// The gradient norm and clip factor computed on the device (optim/grad_norm_on_device.h) against the norm written
// out in float64 here: gradients of awkward sizes (around the 2048-element chunk), more of them than one GPU
// launch's table holds, the factor when clipping applies, when it does not and when it is off, a non-finite
// gradient, and the same bits on a second run (the chunks are summed in a fixed order).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "optim/grad_norm_on_device.h"
#include "tests/test_support.h"

namespace retort::optim {
namespace {

struct Grads {
  std::vector<Tensor> tensors;
  double norm = 0;  // float64 reference
};

Grads random_grads(const std::vector<int64_t>& sizes, Device device) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  Grads out;
  double sum = 0;
  for (int64_t n : sizes) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      x = normal(rng);
      sum += static_cast<double>(x) * x;
    }
    out.tensors.push_back(Tensor::from_floats(v, {n}, DType::F32, device));
  }
  out.norm = std::sqrt(sum);
  return out;
}

// [norm, factor] after grad_norm_and_clip_factor with `max_norm`.
std::pair<float, float> run(const std::vector<Tensor>& grads, double max_norm, Device device) {
  Tensor out = Tensor::zeros({2}, DType::F32, device);
  grad_norm_and_clip_factor(grads, max_norm, out.data<float>(), out.data<float>() + 1, device);
  const std::vector<float> values = out.to_floats();
  return {values[0], values[1]};
}

void check_against_float64(Device device, const std::vector<int64_t>& sizes) {
  const Grads g = random_grads(sizes, device);
  SCOPED_TRACE(fmt::format("{} gradients on {}, norm {}", sizes.size(), device.str(), g.norm));
  const auto [norm, unclipped] = run(g.tensors, 0.0, device);
  EXPECT_NEAR(norm, g.norm, 1e-6 * g.norm);
  EXPECT_EQ(unclipped, 1.0f);                                  // max_norm 0: clipping off
  EXPECT_EQ(run(g.tensors, 2 * g.norm, device).second, 1.0f);  // the limit is above the norm
  const double limit = 0.25 * g.norm;
  const float factor = run(g.tensors, limit, device).second;
  EXPECT_NEAR(factor, limit / (g.norm + 1e-6), 1e-6 * factor);
  // The same bits again: no atomics, a fixed order.
  EXPECT_EQ(run(g.tensors, limit, device), run(g.tensors, limit, device));
}

void check_non_finite(Device device) {
  Grads g = random_grads({100, 3000}, device);
  std::vector<float> bad(50, 0.0f);
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  g.tensors.push_back(Tensor::from_floats(bad, {50}, DType::F32, device));
  const auto [norm, factor] = run(g.tensors, 1e-3, device);
  EXPECT_TRUE(std::isnan(norm));
  EXPECT_EQ(factor, 1.0f);  // as clip_grad_norm: a non-finite norm clips nothing
}

TEST(GradNormOnDevice, CpuMatchesFloat64) {
  check_against_float64(Device::cpu(), {1, 17, 2048, 2049, 3 * 2048 + 5, 40000});
  check_non_finite(Device::cpu());
  EXPECT_EQ(run({}, 1.0, Device::cpu()), (std::pair<float, float>{0.0f, 1.0f}));
}

TEST(GradNormOnDeviceCuda, MatchesFloat64) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_against_float64(Device::cuda(0), {1, 17, 2048, 2049, 3 * 2048 + 5, 300000});
  check_non_finite(Device::cuda(0));
  EXPECT_EQ(run({}, 1.0, Device::cuda(0)), (std::pair<float, float>{0.0f, 1.0f}));
}

TEST(GradNormOnDeviceCuda, MoreGradientsThanOneLaunchHolds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<int64_t> sizes;
  for (int i = 0; i < 1500; ++i) sizes.push_back(1 + (i * 53) % 5000);
  check_against_float64(Device::cuda(0), sizes);
}

}  // namespace
}  // namespace retort::optim
