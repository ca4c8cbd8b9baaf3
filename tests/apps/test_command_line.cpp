// What a user sees of the command line, through the real binary: --version, --print-config, the hint for a config
// key typed as a flag, one meaning of --nproc and --tp in every command, a rank's error printed once with its rank,
// and a GPU that is not there named as a --device problem.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/tensor/device.h"
#include "tests/apps/binary_output_support.h"
#include "tests/test_support.h"

namespace retort::apps_testing {
namespace {

namespace fs = std::filesystem;

size_t count_of(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// The YAML after the log lines (there are none for --print-config, but a warning must not break the test).
YAML::Node printed_config(const CommandOutput& out) {
  return YAML::Load(out.text);
}

TEST(CommandLine, VersionNamesTheVersionAndTheSourceCommit) {
  const CommandOutput out = run_retort({"--version"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_TRUE(out.text.starts_with("retort ")) << out.text;
  EXPECT_TRUE(out.text.find("with CUDA") != std::string::npos || out.text.find("CPU only") != std::string::npos)
      << out.text;
  // The commit of the source tree the binary was built from, when the tree is a git checkout.
  FILE* git =
      ::popen(("git -C " + shell_word(RETORT_SOURCE_DIR) + " rev-parse --short=12 HEAD 2>/dev/null").c_str(), "r");
  std::array<char, 64> head{};
  const bool have_git = git != nullptr && std::fgets(head.data(), head.size(), git) != nullptr;
  if (git != nullptr) ::pclose(git);
  if (have_git && !std::getenv("RETORT_BINARY")) {
    std::string commit(head.data());
    commit.erase(commit.find_last_not_of("\n") + 1);
    EXPECT_NE(out.text.find("commit " + commit), std::string::npos) << out.text;
  }
}

TEST(CommandLine, PrintConfigShowsTheResolvedConfigAndStartsNothing) {
  ::retort::testing::TempFolder dir;
  const fs::path run_dir = dir.path() / "never_created";
  const CommandOutput out =
      run_retort({"train", "--print-config", "--tp", "2", "train.steps=7", "run.dir=" + run_dir.string()});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const YAML::Node config = printed_config(out);
  EXPECT_EQ(config["train"]["steps"].as<int>(), 7);
  EXPECT_EQ(config["parallel"]["tp"].as<int>(), 2);    // --tp is parallel.tp
  EXPECT_EQ(config["model"]["n_layer"].as<int>(), 4);  // a default the user did not set
  EXPECT_FALSE(fs::exists(run_dir));
}

TEST(CommandLine, AConfigKeyTypedAsAFlagIsHintedAsAnOverride) {
  const CommandOutput out = run_retort({"train", "--steps", "20"});
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.text.find("--steps"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("train.steps=VALUE"), std::string::npos) << out.text;
  const CommandOutput with_value = run_retort({"distill", "train", "--batch-size=4"});
  EXPECT_NE(with_value.text.find("train.batch_size=4"), std::string::npos) << with_value.text;
  // Not a config key: the parser's own message only.
  const CommandOutput unknown = run_retort({"train", "--no-such-thing"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_EQ(unknown.text.find("config key"), std::string::npos) << unknown.text;
}

TEST(CommandLine, NprocAndTpMeanTheSameInEveryCommand) {
  // --nproc that cannot hold the tensor-parallel degree: one error, before any rank starts.
  const CommandOutput bad = run_retort({"train", "--nproc", "3", "parallel.tp=2"});
  EXPECT_EQ(bad.exit_code, 2) << bad.text;
  EXPECT_NE(bad.text.find("multiple of the tensor-parallel degree"), std::string::npos) << bad.text;
  EXPECT_EQ(count_of(bad.text, "cannot hold"), 1U) << bad.text;
  // The top-k cache splits its teacher over all ranks: --nproc N is tp N there.
  const CommandOutput topk = run_retort({"distill", "topk", "--nproc", "2", "--print-config"});
  ASSERT_EQ(topk.exit_code, 0) << topk.text;
  EXPECT_EQ(printed_config(topk)["parallel"]["tp"].as<int>(), 2);
  const CommandOutput disagree = run_retort({"distill", "topk", "--nproc", "2", "--tp", "4", "--print-config"});
  EXPECT_EQ(disagree.exit_code, 2);
  EXPECT_NE(disagree.text.find("disagree"), std::string::npos) << disagree.text;
  const CommandOutput generate =
      run_retort({"generate", "--checkpoint", "x", "--prompt", "a", "--nproc", "2", "--tp", "3"});
  EXPECT_EQ(generate.exit_code, 2);
  EXPECT_NE(generate.text.find("--nproc 2 and --tp 3 disagree"), std::string::npos) << generate.text;
}

TEST(CommandLine, AnErrorEveryRankRaisesIsPrintedOnceWithItsRanks) {
  ::retort::testing::TempFolder dir;
  const CommandOutput out =
      run_retort({"train", "--nproc", "2", "data.corpus=" + (dir.path() / "missing.txt").string(),
                  "data.dir=" + (dir.path() / "data").string(), "run.dir=" + (dir.path() / "run").string()});
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_EQ(count_of(out.text, "missing.txt' does not exist"), 1U) << out.text;
  EXPECT_NE(out.text.find("rank 0: corpus"), std::string::npos) << out.text;
}

TEST(CommandLine, AGpuThatIsNotThereIsADeviceError) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a GPU";
  const CommandOutput out = run_retort({"train", "--device", "cuda", "train.steps=1"});
  EXPECT_EQ(out.exit_code, 2) << out.text;
  EXPECT_NE(out.text.find("--device cuda:"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("Use --device cpu"), std::string::npos) << out.text;
}

}  // namespace
}  // namespace retort::apps_testing
