// bf16 working copies of the weights in a tensor-parallel MLP (column-parallel then row-parallel) at tp 1, 2 and 4
// (Gloo thread ranks): each rank's output and LOCAL f32 gradients match the dense float64 math written here (to
// bf16 accuracy), and equal bit for bit what the per-step casts give, before and after AdamW steps that update
// the masters and rewrite their copies in the same pass.
#include <gtest/gtest.h>

#include "core/nn/working_copy.h"
#include "core/ops/ops.h"
#include "optim/adamw/adamw.h"
#include "parallel/tp/layers.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/tp/tp_test_support.h"

namespace retort {
namespace {

using comm_testing::on_ranks;
using namespace tp_testing;

// bf16 inputs and weights, f32 accumulation, bf16 outputs: a few bf16 ulps of the largest value.
constexpr double kBf16Tol = 3e-2;

constexpr int64_t kRows = 6, kIn = 16, kHidden = 32, kOut = 8;

struct Dense {
  Mat x, w1, b1, w2, b2, r;
};

Dense dense_inputs() {
  return {random_mat(kRows, kIn, 11),         random_mat(kHidden, kIn, 12, 0.3), random_mat(kHidden, 1, 13, 0.1),
          random_mat(kOut, kHidden, 14, 0.3), random_mat(kOut, 1, 15, 0.1),      random_mat(kRows, kOut, 16)};
}

void set_param(const Tensor& param, const Mat& value) {
  Tensor handle = param;
  handle.copy_(to_tensor(value).view(param.shape()));
}

Mat row_of(const Mat& column) {  // [n, 1] -> [1, n]
  Mat r(1, column.rows);
  r.v = column.v;
  return r;
}

// Everything one rank saw over forward, backward, an AdamW step and the forward after it, per step.
struct RankRun {
  std::vector<std::vector<float>> outputs, grads;
};

// Runs `steps` steps of the MLP on every rank of a tp group, with or without working copies.
std::vector<RankRun> run_mlp(int tp, bool working_copies, int steps, const Dense& d) {
  nn::set_working_copies_enabled(working_copies);
  std::vector<RankRun> runs(static_cast<size_t>(tp));
  on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
    const int rank = group->rank();
    tp::ColumnParallelLinear up(kIn, kHidden, true, group, /*gather_output=*/false);
    tp::RowParallelLinear down(kHidden, kOut, true, group, /*input_is_parallel=*/true);
    set_param(up.weight(), shard(d.w1, true, 1, rank, tp));
    set_param(up.named_parameters()[1].second, shard(row_of(d.b1), false, 1, rank, tp));
    set_param(down.weight(), shard(d.w2, false, 1, rank, tp));
    set_param(down.named_parameters()[1].second, row_of(d.b2));
    nn::NamedTensors params = up.named_parameters();
    for (auto& named : down.named_parameters()) params.push_back(named);
    optim::AdamW optimizer(optim::decay_groups(params, 0.1), {});
    RankRun& run = runs[static_cast<size_t>(rank)];
    for (int step = 0; step < steps; ++step) {
      const Tensor x = to_tensor(d.x, DType::BF16);
      const Tensor y = down.forward(up.forward(x, DType::BF16), DType::BF16);
      run.outputs.push_back(y.to_floats());
      ops::sum(ops::mul(ops::cast(y, DType::F32), to_tensor(d.r).view(y.shape()))).backward();
      for (auto& [name, p] : params) run.grads.push_back(p.grad().to_floats());
      optimizer.step(1e-2);
      optimizer.zero_grad();
    }
  });
  nn::set_working_copies_enabled(true);
  return runs;
}

TEST(TpWorkingCopies, MatchDenseFloat64AndPerStepCastsBitForBit) {
  const Dense d = dense_inputs();
  // The dense first step: y = (x W1^T + b1) W2^T + b2, seeded with dL/dy = r.
  Mat h = matmul_nt(d.x, d.w1);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kHidden; ++j) h.at(i, j) += d.b1.at(j, 0);
  Mat y = matmul_nt(h, d.w2);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kOut; ++j) y.at(i, j) += d.b2.at(j, 0);
  const Mat dh = matmul_nn(d.r, d.w2), dw2 = matmul_tn(d.r, h), dw1 = matmul_tn(dh, d.x);
  Mat db1(1, kHidden), db2(1, kOut);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kHidden; ++j) db1.at(0, j) += dh.at(i, j);
    for (int64_t j = 0; j < kOut; ++j) db2.at(0, j) += d.r.at(i, j);
  }
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    const int steps = 3;
    const std::vector<RankRun> kept = run_mlp(tp, true, steps, d), cast = run_mlp(tp, false, steps, d);
    for (int rank = 0; rank < tp; ++rank) {
      const RankRun& run = kept[static_cast<size_t>(rank)];
      // Step 1 against float64: the output (replicated after the row-parallel reduce) and this rank's slices.
      const auto as_doubles = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
      EXPECT_LE(rel_error(as_doubles(run.outputs[0]), y.v), kBf16Tol) << "output, rank " << rank;
      const Mat want[] = {shard(dw1, true, 1, rank, tp), shard(db1, false, 1, rank, tp), shard(dw2, false, 1, rank, tp),
                          db2};
      const char* names[] = {"up.weight", "up.bias", "down.weight", "down.bias"};
      for (size_t p = 0; p < 4; ++p)
        EXPECT_LE(rel_error(as_doubles(run.grads[p]), want[p].v), kBf16Tol) << names[p] << " grad, rank " << rank;
      // Every step, output and gradient: the same bits as casting the masters on every forward.
      const RankRun& reference = cast[static_cast<size_t>(rank)];
      ASSERT_EQ(run.outputs.size(), reference.outputs.size());
      for (size_t s = 0; s < run.outputs.size(); ++s) EXPECT_EQ(run.outputs[s], reference.outputs[s]) << "step " << s;
      ASSERT_EQ(run.grads.size(), reference.grads.size());
      for (size_t g = 0; g < run.grads.size(); ++g)
        EXPECT_EQ(run.grads[g], reference.grads[g]) << "step " << g / 4 << " " << names[g % 4];
    }
  }
}

}  // namespace
}  // namespace retort
