// `retort distill train` over two tensor-parallel processes (the real binary, started by the launcher as a user
// would): a student of the top-k cache stopped by a NaN and resumed with --resume logs the same loss, KD part and
// cross-entropy, bit for bit, as the run that never stopped.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/command_ranks_support.h"
#include "tests/distill/distill_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

TEST(DistillCommandParallel, ATensorParallelStudentResumesBitIdentically) {
  const fs::path& root = testing::teacher_with_cache();
  const fs::path out = testing::fresh_dir("distill_tp2_resume");
  auto keys = [&](const std::string& name) {
    auto overrides = testing::student_overrides(root, out / name);
    overrides.insert(overrides.end(), {"parallel.tp=2", "train.checkpoint_every=8"});
    return overrides;
  };
  auto distill_train = [](const std::vector<std::string>& overrides, bool resume) {
    std::vector<std::string> args{"distill", "train"};
    if (resume) args.push_back("--resume");
    args.insert(args.end(), overrides.begin(), overrides.end());
    return apps_testing::run_command_on_ranks(2, args);
  };
  ASSERT_EQ(distill_train(keys("straight"), false), 0);
  auto broken = keys("interrupted");
  broken.push_back("train.inject_nan_at_step=11");
  EXPECT_NE(distill_train(broken, false), 0) << "a NaN loss must stop both ranks with an error";
  ASSERT_EQ(distill_train(keys("interrupted"), true), 0);

  const auto a = testing::read_metrics(out / "straight"), b = testing::read_metrics(out / "interrupted");
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(b.size(), 24u) << "metrics.jsonl holds each step once after a resume";
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"loss", "kd", "ce", "lr"})
      EXPECT_EQ(a[i].at(key).get<double>(), b[i].at(key).get<double>()) << "step " << i + 1 << " " << key;
  }
  EXPECT_TRUE(fs::exists(out / "interrupted" / "checkpoints" / "step_00000024" / "model-tp01-of-02.safetensors"));
}

}  // namespace
}  // namespace retort::distill
