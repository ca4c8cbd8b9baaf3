// The REKLS / AdamW split: which parameters go where, the combined optimizer stepping each part exactly as the
// part would alone, and its state resuming bit-identically.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "optim/composite_optimizer.h"
#include "optim/rekls/rekls.h"
#include "optim/rekls/rekls_routing.h"
#include "tests/optim/rekls/rekls_test_support.h"

namespace retort::optim {
namespace {

Tensor param(const Shape& shape, uint32_t seed) {
  return Tensor::from_floats(testing::normal_values(shape_numel(shape), seed, 0.5), shape).set_requires_grad(true);
}

nn::NamedTensors small_model(uint32_t seed) {
  return {{"wte.weight", param({50, 8}, seed)},
          {"blocks.0.attn.qkv.weight", param({24, 8}, seed + 1)},
          {"blocks.0.attn.qkv.bias", param({24}, seed + 2)},
          {"blocks.0.mlp.fc.weight", param({32, 8}, seed + 3)},
          {"ln_f.weight", param({8}, seed + 4)}};
}

void set_gradients(nn::NamedTensors& params, int step) {
  uint32_t seed = 500 + 10 * static_cast<uint32_t>(step);
  for (auto& [name, p] : params) p.set_grad(Tensor::from_floats(testing::normal_values(p.numel(), seed++), p.shape()));
}

TEST(ReklsRouting, VectorsEmbeddingsAndNamedParametersGoToAdamW) {
  ReklsRouting routing;
  EXPECT_TRUE(routes_to_adamw("wte.weight", Tensor::zeros({50, 8}), routing));
  EXPECT_TRUE(routes_to_adamw("lm_head.weight", Tensor::zeros({50, 8}), routing));
  EXPECT_TRUE(routes_to_adamw("blocks.0.ln_1.weight", Tensor::zeros({8}), routing));
  EXPECT_FALSE(routes_to_adamw("blocks.0.mlp.fc.weight", Tensor::zeros({32, 8}), routing));
  routing.adamw_name_patterns = split_name_patterns(" mlp , ,qkv");
  EXPECT_EQ(routing.adamw_name_patterns, (std::vector<std::string>{"mlp", "qkv"}));
  EXPECT_TRUE(routes_to_adamw("blocks.0.mlp.fc.weight", Tensor::zeros({32, 8}), routing));
  EXPECT_FALSE(routes_to_adamw("wte.weight", Tensor::zeros({50, 8}), routing));
}

TEST(ReklsRouting, CombinedOptimizerStepsEachPartAsItWouldAlone) {
  nn::NamedTensors combined_params = small_model(1), rekls_params = small_model(1), adam_params = small_model(1);
  auto combined = make_rekls_optimizer(combined_params, ReklsOptions{}, AdamWOptions{}, 0.05, ReklsRouting{}, nullptr);
  EXPECT_EQ(combined->name(), "rekls+adamw");
  // The same split by hand: REKLS on the two matrices, AdamW with the decay split on the rest.
  Rekls rekls({{"rekls", {rekls_params[1], rekls_params[3]}, 0.05}}, ReklsOptions{});
  AdamW adam(decay_groups({adam_params[0], adam_params[2], adam_params[4]}, 0.05), AdamWOptions{});
  for (int step = 1; step <= 3; ++step) {
    set_gradients(combined_params, step);
    set_gradients(rekls_params, step);
    set_gradients(adam_params, step);
    combined->step(1e-2);
    rekls.step(1e-2);
    adam.step(1e-2);
  }
  for (size_t i : {1u, 3u}) EXPECT_EQ(combined_params[i].second.to_floats(), rekls_params[i].second.to_floats());
  for (size_t i : {0u, 2u, 4u}) EXPECT_EQ(combined_params[i].second.to_floats(), adam_params[i].second.to_floats());
  combined->zero_grad();
  for (const auto& [name, p] : combined_params) EXPECT_FALSE(p.grad().defined()) << name;
}

TEST(ReklsRouting, CombinedStateResumesBitIdentically) {
  nn::NamedTensors straight = small_model(2), resumed = small_model(2);
  auto a = make_rekls_optimizer(straight, ReklsOptions{}, AdamWOptions{}, 0.05, ReklsRouting{}, nullptr);
  auto b = make_rekls_optimizer(resumed, ReklsOptions{}, AdamWOptions{}, 0.05, ReklsRouting{}, nullptr);
  for (int step = 1; step <= 4; ++step) {
    if (step == 3) {
      OptimizerState saved = b->state();
      for (auto& [name, t] : saved.tensors) t = t.clone();
      b = make_rekls_optimizer(resumed, ReklsOptions{}, AdamWOptions{}, 0.05, ReklsRouting{}, nullptr);
      b->load_state(saved);
    }
    set_gradients(straight, step);
    set_gradients(resumed, step);
    a->step(1e-2);
    b->step(1e-2);
  }
  for (size_t i = 0; i < straight.size(); ++i)
    EXPECT_EQ(straight[i].second.to_floats(), resumed[i].second.to_floats()) << straight[i].first;
  OptimizerState adam_only;
  adam_only.metadata = {{"optimizer", "adamw"}, {"step", "2"}};
  try {
    b->load_state(adam_only);
    FAIL() << "an AdamW state must not load into rekls+adamw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("adamw"), std::string::npos) << e.what();
  }
}

TEST(ReklsRouting, OnlyMatricesOrOnlyVectorsGiveThePlainOptimizer) {
  nn::NamedTensors matrices{{"fc.weight", param({4, 6}, 3)}}, vectors{{"ln.weight", param({6}, 4)}};
  EXPECT_EQ(make_rekls_optimizer(matrices, {}, {}, 0.0, {}, nullptr)->name(), "rekls");
  EXPECT_EQ(make_rekls_optimizer(vectors, {}, {}, 0.0, {}, nullptr)->name(), "adamw");
}

}  // namespace
}  // namespace retort::optim
