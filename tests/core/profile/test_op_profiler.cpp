// The op profiler on the CPU (host clock; the CUDA event path is run by bench_train_throughput --profile-ops on a
// GPU): a known sequence of ops gives one row per kernel and phase with the right call counts, backward kernels
// under "backward", backward nodes in their own table, times that add up within the step, and nothing recorded
// while no profile is open.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/ops/ops.h"
#include "core/profile/op_profiler.h"
#include "core/util/error.h"

namespace retort::profile {
namespace {

const OpTiming* find(const std::vector<OpTiming>& rows, const std::string& phase, const std::string& name) {
  auto it =
      std::find_if(rows.begin(), rows.end(), [&](const OpTiming& t) { return t.phase == phase && t.name == name; });
  return it == rows.end() ? nullptr : &*it;
}

TEST(OpProfiler, CountsEachDispatchByPhaseAndSumsWithinTheStep) {
  Tensor a = Tensor::full({64, 64}, 0.5);
  a.set_requires_grad(true);
  const Tensor b = Tensor::full({64, 64}, 2.0);
  ops::add(a, b);  // before the profile: not counted
  start_op_profile(Device::cpu());
  Tensor y = ops::add(a, b);
  y = ops::add(y, b);
  y = ops::add(y, b);
  const Tensor loss = ops::sum(ops::mul(y, b));
  loss.backward();
  const OpProfile profile = stop_op_profile();
  ops::add(a, b);  // after: not counted either

  const OpTiming* add = find(profile.ops, "forward", "add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->calls, 3);
  const OpTiming* mul = find(profile.ops, "forward", "mul");
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->calls, 1);
  // The backward of mul runs mul kernels (g * b) under "backward"; its node is timed in the node table.
  const OpTiming* mul_backward = find(profile.ops, "backward", "mul");
  ASSERT_NE(mul_backward, nullptr);
  EXPECT_GE(mul_backward->calls, 1);
  const OpTiming* mul_node = find(profile.nodes, "backward", "mul");
  ASSERT_NE(mul_node, nullptr);
  EXPECT_EQ(mul_node->calls, 1);
  ASSERT_NE(find(profile.nodes, "backward", "add"), nullptr);
  EXPECT_EQ(find(profile.nodes, "backward", "add")->calls, 3);

  EXPECT_GT(profile.step_ms, 0.0);
  EXPECT_LE(profile.ops_ms(), profile.step_ms);
  for (size_t i = 1; i < profile.ops.size(); ++i) EXPECT_GE(profile.ops[i - 1].total_ms, profile.ops[i].total_ms);
  const nlohmann::json json = op_profile_json(profile);
  EXPECT_EQ(json["ops"].size(), profile.ops.size());
  EXPECT_NE(format_op_profile(profile).find("add"), std::string::npos);
}

TEST(OpProfiler, OneProfileAtATime) {
  start_op_profile(Device::cpu());
  EXPECT_THROW(start_op_profile(Device::cpu()), Error);
  stop_op_profile();
  EXPECT_THROW(stop_op_profile(), Error);
}

}  // namespace
}  // namespace retort::profile
