// `retort train` over several processes (the real binary, started by the launcher as a user would): tensor
// parallelism follows the dense run step for step, a tp = 2 run resumes bit-identically after a NaN stop, and
// a checkpoint refuses to load at another tp. The tiny config matches test_trainer.cpp's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/util/error.h"
#include "distill/train/config_builders.h"
#include "distill/train/training_loop.h"
#include "tests/apps/command_ranks_support.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

using testing::read_metrics;
using testing::resolve;

std::vector<std::string> tiny(const fs::path& run_dir) {
  return testing::tiny_overrides(run_dir);
}

fs::path fresh(const std::string& name) {
  return testing::fresh_dir("tp_" + name);
}

int train_ranks(int nproc, std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return apps_testing::run_command_on_ranks(nproc, args);
}

TEST(TrainerParallel, TensorParallelFollowsTheDenseRun) {
  const fs::path dense = fresh("dense"), tp2 = fresh("tp2");
  run_label_training(resolve(tiny(dense)), Device::cpu(), false);
  auto args = tiny(tp2);
  args.push_back("parallel.tp=2");
  ASSERT_EQ(train_ranks(2, args), 0);
  const auto a = read_metrics(dense), b = read_metrics(tp2);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << i + 1;
    EXPECT_NEAR(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>(), 1e-4) << "step " << i + 1;
  }
  EXPECT_NEAR(b[5]["eval_loss"].get<double>(), a[5]["eval_loss"].get<double>(), 1e-5);
  EXPECT_TRUE(fs::exists(tp2 / "checkpoints" / "step_00000006" / "model-tp01-of-02.safetensors"));
}

TEST(TrainerParallel, TensorParallelResumeIsBitIdenticalAndTpMustMatch) {
  const fs::path straight = fresh("straight"), interrupted = fresh("interrupted");
  auto args = tiny(straight);
  args.push_back("parallel.tp=2");
  ASSERT_EQ(train_ranks(2, args), 0);
  auto broken = tiny(interrupted);
  broken.push_back("parallel.tp=2");
  broken.push_back("train.inject_nan_at_step=3");
  EXPECT_NE(train_ranks(2, broken), 0) << "a NaN loss must stop every rank with an error";
  auto resume = tiny(interrupted);
  resume.insert(resume.end(), {"parallel.tp=2", "--resume"});
  ASSERT_EQ(train_ranks(2, resume), 0);
  const auto a = read_metrics(straight), b = read_metrics(interrupted);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_EQ(a[5]["eval_loss"].get<double>(), b[5]["eval_loss"].get<double>());

  // The same checkpoint in a single process (tp 1) is refused, naming both values.
  try {
    run_label_training(resolve(tiny(straight)), Device::cpu(), true);
    FAIL() << "a tp = 2 checkpoint was loaded at tp = 1";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp = 2 but this run has parallel.tp = 1"), std::string::npos)
        << e.what();
  }
}

TEST(TrainerParallel, TpThatDoesNotFitIsAClearError) {
  try {
    auto overrides = tiny(fresh("single"));
    overrides.push_back("parallel.tp=2");
    run_label_training(resolve(overrides), Device::cpu(), false);
    FAIL() << "tp = 2 in one process was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("add --nproc 2"), std::string::npos) << e.what();
  }
  auto args = tiny(fresh("three_heads"));
  args.insert(args.end(), {"parallel.tp=2", "model.n_head=1"});
  EXPECT_NE(train_ranks(2, args), 0) << "one head cannot split over 2 ranks";
}

}  // namespace
}  // namespace retort::distill
