// `retort eval` through the real binary: --json prints exactly one JSON object on stdout (logs on stderr); the
// same evaluation on two ranks (--nproc 2: two data-parallel replicas sharing the batches; --tp 2: the model split
// over two ranks) gives the figures of one rank within float tolerance; a --step without a checkpoint exits with
// status 2 and lists the steps there are.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "distill/train/training_loop.h"
#include "tests/apps/binary_output_support.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

class EvalCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = testing::fresh_dir("eval_command_run");
    run_label_training(testing::resolve(testing::tiny_overrides(run_dir_)), Device::cpu(), false);
  }
  static inline fs::path run_dir_;
};

// `retort eval <args...>`: the exit status; stdout and stderr to their own files.
int run_eval(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::vector<std::string> words{"eval"};
  words.insert(words.end(), args.begin(), args.end());
  return apps_testing::run_retort_to_files(words, out.string(), err.string());
}

TEST_F(EvalCommand, JsonOnTwoRanksGivesTheFiguresOfOne) {
  const fs::path tmp = testing::fresh_dir("eval_command_out");
  fs::create_directories(tmp);
  auto eval_json = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args{"--checkpoint", run_dir_.string(), "--json", "--batches", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    const fs::path out = tmp / (name + ".json"), err = tmp / (name + ".log");
    EXPECT_EQ(run_eval(args, out, err), 0) << ::retort::testing::read_bytes(err);
    const std::string text = ::retort::testing::read_bytes(out);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "one line on stdout: " << text;
    return nlohmann::json::parse(text);  // throws, failing the test, unless stdout is exactly one JSON value
  };
  const nlohmann::json one = eval_json("one", {});
  for (const char* key :
       {"run", "checkpoint", "step", "data", "tokens", "bytes", "loss", "perplexity", "bits_per_byte"})
    EXPECT_TRUE(one.contains(key)) << key;
  EXPECT_EQ(one.at("step"), 6);
  EXPECT_GT(one.at("bytes").get<int64_t>(), one.at("tokens").get<int64_t>()) << "a token stands for >1 byte";
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"dp2", {"--nproc", "2"}}, {"tp2", {"--tp", "2"}}}) {
    const nlohmann::json two = eval_json(name, extra);
    EXPECT_EQ(two.at("tokens"), one.at("tokens")) << name;
    EXPECT_EQ(two.at("bytes"), one.at("bytes")) << name;
    for (const char* key : {"loss", "bits_per_byte", "perplexity"})
      EXPECT_NEAR(two.at(key).get<double>(), one.at(key).get<double>(), 1e-5 * one.at(key).get<double>())
          << name << " " << key;
    EXPECT_EQ(two.at("tp").get<int>() * two.at("dp").get<int>(), 2) << name;
  }
  EXPECT_EQ(eval_json("tp2_step", {"--tp", "2", "--step", "3"}).at("step"), 3);
}

TEST_F(EvalCommand, AStepWithoutACheckpointIsStatusTwoAndListsTheSteps) {
  const fs::path tmp = testing::fresh_dir("eval_command_bad");
  fs::create_directories(tmp);
  EXPECT_EQ(run_eval({"--checkpoint", run_dir_.string(), "--step", "5"}, tmp / "out", tmp / "err"), 2);
  EXPECT_NE(::retort::testing::read_bytes(tmp / "err").find("step(s) 3, 6"), std::string::npos)
      << ::retort::testing::read_bytes(tmp / "err");
  EXPECT_EQ(run_eval({"--checkpoint", (run_dir_ / "checkpoints" / "step_00000006").string()}, tmp / "out", tmp / "err"),
            2);
  EXPECT_NE(::retort::testing::read_bytes(tmp / "err").find("--step 6"), std::string::npos)
      << ::retort::testing::read_bytes(tmp / "err");
}

}  // namespace
}  // namespace retort::distill
