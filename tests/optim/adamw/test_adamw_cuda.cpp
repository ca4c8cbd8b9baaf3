// AdamW's CUDA update against its CPU update over several steps (skipped without a GPU), and the CPU update
// against the formula written out in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "optim/adamw/adamw.h"

namespace retort::optim {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(AdamW, CpuStepMatchesFloat64Formula) {
  const size_t n = 1000;
  auto p0 = random_values(n, 1);
  Tensor p = Tensor::from_floats(p0, {static_cast<int64_t>(n)}).set_requires_grad(true);
  AdamW opt({{"all", {{"p", p}}, 0.1}}, {0.9, 0.95, 1e-8});
  std::vector<double> ref(p0.begin(), p0.end()), m(n, 0), v(n, 0);
  for (int step = 1; step <= 4; ++step) {
    auto g = random_values(n, 10 + step);
    p.set_grad(Tensor::from_floats(g, {static_cast<int64_t>(n)}));
    const double lr = 1e-2 / step;
    opt.step(lr);
    for (size_t i = 0; i < n; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * double(g[i]);
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      ref[i] -= lr * (0.1 * ref[i] + mh / (std::sqrt(vh) + 1e-8));
    }
  }
  const auto got = p.to_doubles();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-6) << i;
}

TEST(AdamWCuda, MatchesCpuOverSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 100003;  // not a multiple of any block size
  auto p0 = random_values(n, 2);
  Tensor pc = Tensor::from_floats(p0, {n}).set_requires_grad(true);
  Tensor pg = Tensor::from_floats(p0, {n}, DType::F32, Device::cuda(0)).set_requires_grad(true);
  AdamW cpu({{"all", {{"p", pc}}, 0.05}}, {0.9, 0.999, 1e-8});
  AdamW gpu({{"all", {{"p", pg}}, 0.05}}, {0.9, 0.999, 1e-8});
  for (int step = 0; step < 5; ++step) {
    auto g = random_values(n, 100 + step);
    pc.set_grad(Tensor::from_floats(g, {n}));
    pg.set_grad(Tensor::from_floats(g, {n}, DType::F32, Device::cuda(0)));
    cpu.step(3e-3);
    gpu.step(3e-3);
  }
  const auto a = pc.to_doubles(), b = pg.to_doubles();
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LT(worst, 1e-6);
  const auto sa = cpu.state(), sb = gpu.state();
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  EXPECT_EQ(sb.metadata.at("step"), "5");
}

}  // namespace
}  // namespace retort::optim
