// `retort train` with optim.name=rekls: a single-process run (REKLS + AdamW) and a tp = 2 run (TP-REKLS + AdamW)
// resume bit-identically from a checkpoint, and the tp = 2 run follows the single-process one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/util/error.h"
#include "distill/train/checkpoint.h"
#include "distill/train/training_loop.h"
#include "tests/apps/command_ranks_support.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tiny_rekls(const fs::path& run_dir) {
  auto overrides = testing::tiny_overrides(run_dir);
  overrides.push_back("optim.name=rekls");
  return overrides;
}

int train_ranks(int nproc, std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return apps_testing::run_command_on_ranks(nproc, args);
}

void expect_same_losses(const fs::path& a_dir, const fs::path& b_dir) {
  const auto a = testing::read_metrics(a_dir), b = testing::read_metrics(b_dir);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(a[5]["eval_loss"].get<double>(), b[5]["eval_loss"].get<double>());
}

TEST(TrainerRekls, ResumeIsBitIdentical) {
  const fs::path straight = testing::fresh_dir("rekls_straight"), interrupted = testing::fresh_dir("rekls_cut");
  run_label_training(testing::resolve(tiny_rekls(straight)), Device::cpu(), false);
  auto broken = tiny_rekls(interrupted);
  broken.push_back("train.inject_nan_at_step=3");
  EXPECT_THROW(run_label_training(testing::resolve(broken), Device::cpu(), false), Error);
  run_label_training(testing::resolve(tiny_rekls(interrupted)), Device::cpu(), true);
  expect_same_losses(straight, interrupted);
  // The checkpoint holds the REKLS state next to AdamW's.
  auto latest = latest_checkpoint(straight);
  ASSERT_TRUE(latest.has_value());
  EXPECT_TRUE(fs::exists(*latest / "optimizer.safetensors") ||
              fs::exists(*latest / "optimizer-tp00-of-01.safetensors"));
}

TEST(TrainerRekls, TensorParallelResumeIsBitIdenticalAndFollowsTheSingleProcessRun) {
  const fs::path dense = testing::fresh_dir("rekls_dense"), straight = testing::fresh_dir("rekls_tp_straight"),
                 interrupted = testing::fresh_dir("rekls_tp_cut");
  run_label_training(testing::resolve(tiny_rekls(dense)), Device::cpu(), false);
  auto args = tiny_rekls(straight);
  args.push_back("parallel.tp=2");
  ASSERT_EQ(train_ranks(2, args), 0);
  auto broken = tiny_rekls(interrupted);
  broken.insert(broken.end(), {"parallel.tp=2", "train.inject_nan_at_step=3"});
  EXPECT_NE(train_ranks(2, broken), 0);
  auto resume = tiny_rekls(interrupted);
  resume.insert(resume.end(), {"parallel.tp=2", "--resume"});
  ASSERT_EQ(train_ranks(2, resume), 0);
  expect_same_losses(straight, interrupted);

  const auto a = testing::read_metrics(dense), b = testing::read_metrics(straight);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
    EXPECT_NEAR(lb, la, 1e-3 * la) << "step " << i + 1 << ": TP-REKLS at tp 2 left the REKLS run";
  }
}

}  // namespace
}  // namespace retort::distill
