// The multi-tensor AdamW update (one table, one launch on a GPU) against AdamW written out in float64 here: several
// tensors of awkward sizes in two weight-decay groups, some with bf16 working copies that the update must leave
// equal to the round-to-nearest-even bf16 of the new master and stamped fresh, and one without a gradient that it
// must leave alone. The same on the GPU (skipped without one), including more tensors than one launch's table holds.
// Also: an optimizer that writes its parameters by hand leaves their working copies stale, and the next forward
// recasts them (Optimizer::step marks them written).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/nn/working_copy.h"
#include "optim/adamw/adamw.h"
#include "tests/test_support.h"

namespace retort::optim {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// AdamW in float64, PyTorch's formula (optim/adamw/adamw.h), one tensor.
struct Float64AdamW {
  std::vector<double> p, m, v;
  explicit Float64AdamW(const std::vector<float>& p0) : p(p0.begin(), p0.end()), m(p0.size()), v(p0.size()) {}
  void step(const std::vector<float>& g, double lr, double wd, int t) {
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * (wd * p[i] + m_hat / (std::sqrt(v_hat) + eps));
    }
  }
};

struct Case {
  std::vector<Tensor> params;
  std::vector<Float64AdamW> reference;
  std::vector<double> decay;
  std::vector<bool> with_copy;
};

// Sizes around the GPU chunk (2048 elements) and the table's capacity; every third tensor keeps no working copy.
void run_case(Device device, const std::vector<int64_t>& sizes) {
  Case c;
  ParamGroup decay{"decay", {}, 0.1}, no_decay{"no_decay", {}, 0.0};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto p0 = random_values(sizes[i], static_cast<uint32_t>(i + 1));
    Tensor p = Tensor::from_floats(p0, {sizes[i]}, DType::F32, device);
    p.set_requires_grad(true);
    c.with_copy.push_back(i % 3 != 2);
    if (c.with_copy.back()) nn::working_copy(p, DType::BF16);  // made by a forward, as in training
    c.params.push_back(p);
    c.reference.emplace_back(p0);
    c.decay.push_back(i % 2 == 0 ? 0.1 : 0.0);
    (i % 2 == 0 ? decay : no_decay).params.emplace_back("p" + std::to_string(i), p);
  }
  // One more parameter that never gets a gradient: the update must skip it.
  const auto frozen0 = random_values(100, 999);
  Tensor frozen = Tensor::from_floats(frozen0, {100}, DType::F32, device);
  frozen.set_requires_grad(true);
  no_decay.params.emplace_back("frozen", frozen);
  AdamW optimizer({decay, no_decay}, {0.9, 0.95, 1e-8});
  for (int t = 1; t <= 3; ++t) {
    const double lr = 1e-2 / t;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto g = random_values(sizes[i], static_cast<uint32_t>(1000 * t + i));
      c.params[i].set_grad(Tensor::from_floats(g, {sizes[i]}, DType::F32, device));
      c.reference[i].step(g, lr, c.decay[i], t);
    }
    optimizer.step(lr);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(fmt::format("tensor {} of {} elements on {}", i, sizes[i], device.str()));
    const std::vector<float> got = c.params[i].to_floats();
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(got[k] - c.reference[i].p[k]));
    EXPECT_LT(worst, 1e-6);
    const Tensor copy = nn::working_copy_buffer(c.params[i]);
    ASSERT_EQ(copy.defined(), c.with_copy[i]);
    if (!copy.defined()) continue;
    // Fresh: stamped with the master's version, and the bf16 rounding of the master it now holds.
    EXPECT_EQ(c.params[i].impl()->working_copy->source_version, c.params[i].impl()->storage->version());
    const std::vector<float> copied = copy.to_floats();
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_EQ(copied[k], static_cast<float>(BFloat16(got[k]))) << "copy element " << k;
  }
  EXPECT_EQ(frozen.to_floats(), frozen0);
}

TEST(AdamWMultiTensor, CpuMatchesFloat64AndWritesWorkingCopies) {
  run_case(Device::cpu(), {1, 17, 2048, 2049, 3 * 2048 + 5, 40000});
}

TEST(AdamWMultiTensorCuda, MatchesFloat64AndWritesWorkingCopies) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  run_case(Device::cuda(0), {1, 17, 2048, 2049, 3 * 2048 + 5, 300000});
}

TEST(AdamWMultiTensorCuda, MoreTensorsThanOneLaunchHolds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<int64_t> sizes;
  for (int i = 0; i < 450; ++i) sizes.push_back(1 + (i * 37) % 3000);
  run_case(Device::cuda(0), sizes);
}

// Descends along the sign of the gradient, writing the parameters through data(): an update the storage stamp
// cannot see, as a hand-written kernel would do.
class SignDescent : public Optimizer {
 public:
  explicit SignDescent(std::vector<ParamGroup> groups) : Optimizer(std::move(groups)) {}
  void update(double lr) override {
    for (auto& group : groups_)
      for (auto& [name, p] : group.params) {
        const std::vector<float> g = p.grad().to_floats();
        float* values = p.data<float>();
        for (size_t i = 0; i < g.size(); ++i) values[i] -= static_cast<float>(lr) * (g[i] > 0 ? 1.0f : -1.0f);
      }
  }
  OptimizerState state() const override { return {}; }
  void load_state(const OptimizerState&) override {}
  std::string name() const override { return "sign-descent"; }
};

TEST(WorkingCopies, AnyOptimizerStepLeavesThemStaleAndTheNextForwardRecasts) {
  const auto p0 = random_values(64, 5);
  Tensor p = Tensor::from_floats(p0, {64});
  p.set_requires_grad(true);
  const std::vector<float> before = nn::working_copy(p, DType::BF16).to_floats();
  SignDescent optimizer({{"all", {{"p", p}}, 0.0}});
  p.set_grad(Tensor::from_floats(random_values(64, 6), {64}));
  optimizer.step(0.25);
  EXPECT_NE(p.impl()->working_copy->source_version, p.impl()->storage->version());
  const std::vector<float> master = p.to_floats(), copy = nn::working_copy(p, DType::BF16).to_floats();
  for (size_t i = 0; i < master.size(); ++i) ASSERT_EQ(copy[i], static_cast<float>(BFloat16(master[i]))) << i;
  EXPECT_NE(copy, before);
}

}  // namespace
}  // namespace retort::optim
