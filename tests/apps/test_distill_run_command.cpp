// `retort distill run` through the real binary, as a user types it: each verb's run.dir default is its own folder;
// `distill run --nproc 2` with parallel.tp=2 trains, caches, evaluates and writes results.json once; run again
// without a flag it is refused with both flags named and the run untouched; --resume finds every stage finished;
// --overwrite (passed on to the ranks, applied once by rank 0) starts again and keeps a user's file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/apps/binary_output_support.h"
#include "tests/distill/distill_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using ::retort::testing::read_bytes;

int run_binary_logged(const std::vector<std::string>& args, const fs::path& log) {
  return apps_testing::run_retort_to_files(args, log.string());
}

// `retort <args...>`: the exit status; stdout and stderr go to `log`.
// The run.dir line of `retort WORDS... --help-config`.
std::string run_dir_default(const std::vector<std::string>& words, const fs::path& log) {
  std::vector<std::string> args = words;
  args.push_back("--help-config");
  EXPECT_EQ(run_binary_logged(args, log), 0);
  const std::string text = read_bytes(log);
  const size_t at = text.find("\nrun.dir ");
  if (at == std::string::npos) return {};
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(DistillRunCommand, EachVerbHasItsOwnDefaultRunFolder) {
  const fs::path log = testing::fresh_dir("distill_run_help") += ".log";
  EXPECT_NE(run_dir_default({"train"}, log).find("runs/toy-gpt"), std::string::npos);
  EXPECT_NE(run_dir_default({"distill", "train"}, log).find("runs/distill-student"), std::string::npos);
  EXPECT_NE(run_dir_default({"distill", "run"}, log).find("runs/distill-run"), std::string::npos);
}

TEST(DistillRunCommand, TwoTensorParallelRanksRunThePipelineAndTheFolderRuleHolds) {
  const fs::path run = testing::fresh_dir("distill_run_tp2");
  const fs::path log = testing::fresh_dir("distill_run_tp2_log") += ".log";
  auto args = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> a{"distill", "run", "--nproc", "2"};
    a.insert(a.end(), flags.begin(), flags.end());
    for (const std::string& key : testing::small_run_overrides(run)) a.push_back(key);
    for (const char* key :
         {"parallel.tp=2", "teacher.n_layer=2", "teacher.n_head=2", "teacher.n_embd=48", "teacher.steps=6",
          "teacher.checkpoint_every=3", "train.steps=6", "distill.k=8", "distill.cache_dtype=f32"})
      a.push_back(key);
    return a;
  };
  ASSERT_EQ(run_binary_logged(args({}), log), 0) << read_bytes(log);
  const std::string output = read_bytes(log);
  EXPECT_EQ(output.find("held-out text"), output.rfind("held-out text")) << "rank 0 alone prints the table\n" << output;
  const nlohmann::json results = nlohmann::json::parse(read_bytes(run / "results.json"));
  EXPECT_GT(results.at("cache_tokens").get<int64_t>(), 0);
  EXPECT_TRUE(std::isfinite(results.at("student_kd").at("loss").get<double>()));
  for (const char* stage : {"teacher", "student_kd", "student_labels"})
    EXPECT_TRUE(fs::exists(run / stage / "checkpoints" / "step_00000006" / "model-tp01-of-02.safetensors")) << stage;

  const std::string before = read_bytes(run / "results.json");
  EXPECT_NE(run_binary_logged(args({}), log), 0) << "a second run into the same folder is refused";
  EXPECT_NE(read_bytes(log).find("--overwrite"), std::string::npos) << read_bytes(log);
  EXPECT_EQ(read_bytes(run / "results.json"), before);

  ASSERT_EQ(run_binary_logged(args({"--resume"}), log), 0) << read_bytes(log);
  EXPECT_NE(read_bytes(log).find("is trained"), std::string::npos) << "every stage was finished\n" << read_bytes(log);
  const nlohmann::json resumed = nlohmann::json::parse(read_bytes(run / "results.json"));
  EXPECT_EQ(resumed.at("student_kd").at("loss"), results.at("student_kd").at("loss"));

  std::ofstream(run / "notes.txt") << "mine";
  ASSERT_EQ(run_binary_logged(args({"--overwrite"}), log), 0) << read_bytes(log);
  EXPECT_TRUE(fs::exists(run / "notes.txt"));
  EXPECT_NE(read_bytes(log).find("training the teacher"), std::string::npos) << "trained anew\n" << read_bytes(log);
  EXPECT_EQ(testing::read_metrics(run / "teacher").size(), 6u);
}

// Cross-tokenizer distillation at tp 2 against tp 1: the teacher's top-k cache over its own tokens and the chunk loss
// over the vocab-split student (cache mode), then an online teacher split like the student (online mode); the
// figures agree up to the order of float sums.
TEST(DistillRunCommand, ACrossTokenizerRunAtTp2GivesTheFiguresOfTp1) {
  const fs::path root = testing::fresh_dir("distill_run_xtoken_tp");
  const fs::path log = testing::fresh_dir("distill_run_xtoken_tp_log") += ".log";
  auto args = [&](const std::string& name, int tp, const std::vector<std::string>& more) {
    std::vector<std::string> a{"distill", "run", "--nproc", std::to_string(tp)};
    for (const std::string& key : testing::pipeline_run_overrides(root / name)) a.push_back(key);
    for (const std::string& key :
         {std::string("distill.xtoken.enabled=true"), std::string("teacher.data.vocab_size=512"),
          "teacher.data.dir=" + (root / "teacher_data").string(), "parallel.tp=" + std::to_string(tp)})
      a.push_back(key);
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  auto results = [&](const std::string& name) {
    return nlohmann::json::parse(read_bytes(root / name / "results.json"));
  };
  auto expect_close = [](const nlohmann::json& a, const nlohmann::json& b, const char* what) {
    for (const char* model : {"teacher", "student_kd", "student_labels"}) {
      const double x = a.at(model).at("bits_per_byte").get<double>(), y = b.at(model).at("bits_per_byte").get<double>();
      EXPECT_NEAR(x, y, 1e-4 * x) << what << " " << model;
    }
  };
  ASSERT_EQ(run_binary_logged(args("tp1", 1, {}), log), 0) << read_bytes(log);
  ASSERT_EQ(run_binary_logged(args("tp2", 2, {}), log), 0) << read_bytes(log);
  expect_close(results("tp1"), results("tp2"), "cache");
  const std::string teacher = "distill.teacher=" + (root / "tp1" / "teacher").string();
  ASSERT_EQ(run_binary_logged(args("online1", 1, {"distill.mode=online", teacher}), log), 0) << read_bytes(log);
  ASSERT_EQ(run_binary_logged(args("online2", 2, {"distill.mode=online", teacher}), log), 0) << read_bytes(log);
  expect_close(results("online1"), results("online2"), "online");
  EXPECT_NE(results("online1").at("student_kd").at("loss"), results("tp1").at("student_kd").at("loss"));
}

}  // namespace
}  // namespace retort::distill
