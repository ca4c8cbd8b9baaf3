// AdamW's update with its scalars read from device memory (AdamW::enqueue_update_from_device, the update a CUDA
// graph replays) against AdamW written out in float64 here with the gradient multiplied by the staged factor:
// learning rate and bias corrections from memory, the factor applied, the gradients left as they were, the working
// copies written and stamped fresh by advance_step(), and the step count advanced only by it. On the CPU and on the
// GPU (skipped without one).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/nn/working_copy.h"
#include "optim/adamw/adamw.h"
#include "tests/test_support.h"

namespace retort::optim {
namespace {

std::vector<float> normal_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

void run_case(Device device) {
  const std::vector<int64_t> sizes{5, 2048, 2049, 9000};
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  std::vector<Tensor> params;
  std::vector<std::vector<double>> p, m, v;
  ParamGroup group{"decay", {}, wd};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto p0 = normal_values(sizes[i], static_cast<uint32_t>(i + 1));
    Tensor t = Tensor::from_floats(p0, {sizes[i]}, DType::F32, device);
    t.set_requires_grad(true);
    nn::working_copy(t, DType::BF16);
    params.push_back(t);
    group.params.emplace_back("p" + std::to_string(i), t);
    p.emplace_back(p0.begin(), p0.end());
    m.emplace_back(p0.size(), 0.0);
    v.emplace_back(p0.size(), 0.0);
  }
  AdamW optimizer({group}, {b1, b2, eps});
  Tensor scalars = Tensor::zeros({4}, DType::F32, device);
  for (int t = 1; t <= 3; ++t) {
    const double lr = 1e-2 / t, factor = t == 2 ? 0.5 : 1.0;
    const auto [c1, c2] = optimizer.next_bias_corrections();
    EXPECT_DOUBLE_EQ(c1, 1 - std::pow(b1, t));
    EXPECT_DOUBLE_EQ(c2, 1 - std::pow(b2, t));
    scalars.copy_(Tensor::from_floats(
        {static_cast<float>(lr), static_cast<float>(c1), static_cast<float>(c2), static_cast<float>(factor)}, {4},
        DType::F32, device));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto g = normal_values(sizes[i], static_cast<uint32_t>(100 * t + i));
      params[i].set_grad(Tensor::from_floats(g, {sizes[i]}, DType::F32, device));
      for (size_t k = 0; k < g.size(); ++k) {
        const double gk = static_cast<double>(static_cast<float>(g[k] * static_cast<float>(factor)));
        m[i][k] = b1 * m[i][k] + (1 - b1) * gk;
        v[i][k] = b2 * v[i][k] + (1 - b2) * gk * gk;
        p[i][k] -= lr * (wd * p[i][k] + (m[i][k] / c1) / (std::sqrt(v[i][k] / c2) + eps));
      }
    }
    optimizer.enqueue_update_from_device(scalars.data<float>());
    EXPECT_EQ(optimizer.steps(), t - 1);  // enqueueing changes no host state
    optimizer.advance_step();
    EXPECT_EQ(optimizer.steps(), t);
    for (size_t i = 0; i < sizes.size(); ++i)
      ASSERT_EQ(params[i].grad().to_floats(), normal_values(sizes[i], static_cast<uint32_t>(100 * t + i)))
          << "gradient " << i << " changed by the update at step " << t;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(fmt::format("tensor {} of {} elements on {}", i, sizes[i], device.str()));
    const std::vector<float> got = params[i].to_floats();
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(got[k] - p[i][k]));
    EXPECT_LT(worst, 1e-6);
    EXPECT_EQ(params[i].impl()->working_copy->source_version, params[i].impl()->storage->version());
    const std::vector<float> copy = nn::working_copy_buffer(params[i]).to_floats();
    for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(copy[k], static_cast<float>(BFloat16(got[k]))) << k;
  }
}

TEST(AdamWDeviceScalars, CpuMatchesFloat64) {
  run_case(Device::cpu());
}

TEST(AdamWDeviceScalarsCuda, MatchesFloat64) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  run_case(Device::cuda(0));
}

}  // namespace
}  // namespace retort::optim
