// bf16 working copies of f32 weights (core/nn/working_copy.h): a forward through the copy gives the same bits, and
// the master the same f32 gradient, as the per-forward cast; the copy is made once and reused while the master is
// unchanged, recast after any write to the master (copy_, a load_state_dict, a write its stamp cannot see once
// marked), replaced rather than duplicated, never kept for activations or frozen tensors, and never made by a
// forward without gradients.
#include <gtest/gtest.h>

#include <random>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/nn/layers.h"
#include "core/nn/working_copy.h"
#include "core/ops/ops.h"

namespace retort::nn {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

Tensor parameter(const std::vector<float>& values, const Shape& shape) {
  Tensor p = Tensor::from_floats(values, shape);
  p.set_requires_grad(true);
  return p;
}

// Forward and backward of x W^T through to_compute in bf16; returns the output and the master's f32 gradient.
std::pair<std::vector<float>, std::vector<float>> linear_step(const Tensor& w, const Tensor& x, const Tensor& r) {
  const Tensor y = ops::linear(x, to_compute(w, DType::BF16), Tensor());
  ops::sum(ops::mul(ops::cast(y, DType::F32), r)).backward();
  std::pair<std::vector<float>, std::vector<float>> out{y.to_floats(), w.grad().to_floats()};
  Tensor handle = w;
  handle.zero_grad();
  return out;
}

TEST(WorkingCopy, SameBitsAndGradientAsThePerForwardCast) {
  const Tensor w = parameter(random_values(8 * 12, 1), {8, 12});
  const Tensor x = Tensor::from_floats(random_values(5 * 12, 2), {5, 12}, DType::BF16);
  const Tensor r = Tensor::from_floats(random_values(5 * 8, 3), {5, 8});
  set_working_copies_enabled(false);
  const auto cast = linear_step(w, x, r);
  EXPECT_EQ(w.impl()->working_copy, nullptr) << "no copy is kept while disabled";
  set_working_copies_enabled(true);
  const auto kept = linear_step(w, x, r);
  ASSERT_NE(w.impl()->working_copy, nullptr);
  EXPECT_EQ(kept.first, cast.first);
  EXPECT_EQ(kept.second, cast.second);
  EXPECT_EQ(w.grad().defined(), false);
  // The gradient reached the f32 master as f32, through the copy's node.
  const Tensor through = to_compute(w, DType::BF16);
  ASSERT_NE(through.grad_fn(), nullptr);
  EXPECT_EQ(through.grad_fn()->name, "working_copy");
  EXPECT_EQ(through.dtype(), DType::BF16);
}

TEST(WorkingCopy, MadeOnceAndReusedWhileTheMasterIsUnchanged) {
  const Tensor w = parameter(random_values(64, 4), {8, 8});
  const Tensor a = to_compute(w, DType::BF16), b = to_compute(w, DType::BF16);
  EXPECT_EQ(a.raw_data(), b.raw_data()) << "both forwards read the one copy";
  const uint64_t stamp = w.impl()->working_copy->source_version;
  EXPECT_EQ(stamp, w.impl()->storage->version());
  to_compute(w, DType::BF16);
  EXPECT_EQ(w.impl()->working_copy->source_version, stamp);
  // The kept handle carries no graph: only each forward's view does.
  EXPECT_EQ(w.impl()->working_copy->value.grad_fn(), nullptr);
}

TEST(WorkingCopy, RecastAfterEveryWriteToTheMaster) {
  Tensor w = parameter(random_values(32, 5), {32});
  const std::vector<float> first = to_compute(w, DType::BF16).to_floats();
  const auto expect_cast_of_master = [&](const char* what) {
    const std::vector<float> master = w.to_floats(), copy = to_compute(w, DType::BF16).to_floats();
    for (size_t i = 0; i < master.size(); ++i)
      ASSERT_EQ(copy[i], static_cast<float>(BFloat16(master[i]))) << what << ", element " << i;
  };
  w.copy_(Tensor::from_floats(random_values(32, 6), {32}));
  expect_cast_of_master("after copy_");
  EXPECT_NE(to_compute(w, DType::BF16).to_floats(), first);

  // A checkpoint load goes through Module::load_state_dict.
  Linear layer(4, 8, false);
  to_compute(layer.weight(), DType::BF16);
  const auto loaded = random_values(32, 7);
  layer.load_state_dict({{"weight", Tensor::from_floats(loaded, {8, 4})}});
  const std::vector<float> copy = to_compute(layer.weight(), DType::BF16).to_floats();
  for (size_t i = 0; i < loaded.size(); ++i) ASSERT_EQ(copy[i], static_cast<float>(BFloat16(loaded[i]))) << i;

  // A write through data() is seen once marked.
  w.data<float>()[3] = 1234.5f;
  mark_written(w);
  expect_cast_of_master("after a marked raw write");
}

TEST(WorkingCopy, OnlyForTrainableF32LeavesAndOnePerWeight) {
  const Tensor frozen = Tensor::from_floats(random_values(16, 8), {16});
  to_compute(frozen, DType::BF16);
  EXPECT_EQ(frozen.impl()->working_copy, nullptr) << "a tensor without requires_grad is cast each time";
  const Tensor w = parameter(random_values(16, 9), {16});
  const Tensor activation = ops::scale(w, 2.0);
  to_compute(activation, DType::BF16);
  EXPECT_EQ(activation.impl()->working_copy, nullptr) << "an op's output is not a weight";
  EXPECT_FALSE(working_copy(w, DType::F32).defined()) << "no copy in the master's own dtype";
  {
    NoGradGuard no_grad;
    to_compute(w, DType::BF16);
    EXPECT_EQ(w.impl()->working_copy, nullptr) << "a forward without gradients (a teacher) makes no copy";
  }
  to_compute(w, DType::BF16);
  const std::shared_ptr<WorkingCopy> kept = w.impl()->working_copy;
  to_compute(w, DType::BF16);
  EXPECT_EQ(w.impl()->working_copy, kept);
  {
    NoGradGuard no_grad;
    const Tensor evaluated = to_compute(w, DType::BF16);
    EXPECT_EQ(evaluated.raw_data(), kept->value.raw_data()) << "evaluation reuses the training copy";
    EXPECT_EQ(evaluated.grad_fn(), nullptr);
  }
}

}  // namespace
}  // namespace retort::nn
