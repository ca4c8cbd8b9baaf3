// The run-folder rule of every training run: a folder that holds a run is refused (and left as it was) unless
// --resume or --overwrite says what to do; --overwrite deletes the run's outputs and nothing else; --resume with
// nothing to resume is an error before any work; both flags at once are an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/config/config_value.h"
#include "core/util/error.h"
#include "distill/distill_config.h"
#include "distill/train/run_folder.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> checkpoint_folders(const fs::path& run_dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints"))
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

TEST(RunFolder, ANewRunRefusesAFolderThatHoldsARunAndLeavesItAsItWas) {
  const fs::path run = testing::fresh_dir("run_folder_refused");
  run_label_training(testing::resolve(testing::tiny_overrides(run)), Device::cpu(), RunStart::kNew);
  ASSERT_EQ(testing::read_metrics(run).size(), 6u);
  const std::string metrics_before = [&] {
    std::ifstream in(run / "metrics.jsonl");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();

  const std::string message = error_of(
      [&] { run_label_training(testing::resolve(testing::tiny_overrides(run)), Device::cpu(), RunStart::kNew); });
  EXPECT_NE(message.find(run.string()), std::string::npos) << message;
  EXPECT_NE(message.find("--resume"), std::string::npos) << message;
  EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  std::ifstream in(run / "metrics.jsonl");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), metrics_before) << "a refused run must lose nothing";
  EXPECT_EQ(checkpoint_folders(run), (std::vector<std::string>{"step_00000003", "step_00000006"}));
}

TEST(RunFolder, OverwriteDeletesTheRunsOutputsAndKeepsEverythingElse) {
  const fs::path run = testing::fresh_dir("run_folder_overwrite");
  run_label_training(testing::resolve(testing::tiny_overrides(run)), Device::cpu(), RunStart::kNew);
  std::ofstream(run / "notes.txt") << "kept";
  fs::create_directories(run / "my_data");

  auto shorter = testing::tiny_overrides(run);
  shorter.push_back("train.steps=3");
  run_label_training(testing::resolve(shorter), Device::cpu(), RunStart::kOverwrite);
  EXPECT_EQ(testing::read_metrics(run).size(), 3u) << "the earlier run's metric lines are gone";
  // Without the clearing, step_00000006 of the earlier run would stay beside the new step_00000003: checkpoints
  // of two runs in one folder.
  EXPECT_EQ(checkpoint_folders(run), (std::vector<std::string>{"step_00000003"}));
  EXPECT_TRUE(fs::exists(run / "notes.txt"));
  EXPECT_TRUE(fs::is_directory(run / "my_data"));
}

TEST(RunFolder, ATrainingRunNeverWritesIntoADistillRunsFolder) {
  // What `distill run` leaves: results.json beside its students (as when run.dir of one command is another's).
  const fs::path run = testing::fresh_dir("run_folder_foreign");
  fs::create_directories(run / "student_kd");
  std::ofstream(run / "results.json") << "{}";
  std::ofstream(run / "config.yaml") << "the pipeline's";
  for (RunStart start : {RunStart::kNew, RunStart::kOverwrite}) {
    const std::string message =
        error_of([&] { run_label_training(testing::resolve(testing::tiny_overrides(run)), Device::cpu(), start); });
    EXPECT_NE(message.find("results.json"), std::string::npos) << message;
    EXPECT_NE(message.find(run.string()), std::string::npos) << message;
  }
  std::ifstream in(run / "config.yaml");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the pipeline's");
  EXPECT_TRUE(fs::exists(run / "results.json"));
  EXPECT_FALSE(fs::exists(run / "metrics.jsonl"));
}

TEST(RunFolder, ResumeWithNothingToResumeIsAnErrorBeforeAnyWork) {
  const fs::path run = testing::fresh_dir("run_folder_resume_nothing");
  const std::string message = error_of(
      [&] { run_label_training(testing::resolve(testing::tiny_overrides(run)), Device::cpu(), RunStart::kResume); });
  EXPECT_NE(message.find("--resume"), std::string::npos) << message;
  EXPECT_NE(message.find(run.string()), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(run)) << "nothing is written for a refused resume";
}

TEST(RunFolder, ResumeAndOverwriteTogetherAreAnError) {
  EXPECT_THROW(run_start_from_flags(true, true), InputError);
  EXPECT_EQ(run_start_from_flags(false, false), RunStart::kNew);
  EXPECT_EQ(run_start_from_flags(true, false), RunStart::kResume);
  EXPECT_EQ(run_start_from_flags(false, true), RunStart::kOverwrite);
}

TEST(RunFolder, EachCommandHasItsOwnDefaultRunFolder) {
  const auto default_of = [](const ConfigSchema& schema) {
    return format_config_value(*schema.find("run.dir")->default_value);
  };
  EXPECT_EQ(default_of(training_schema()), "runs/toy-gpt");
  EXPECT_EQ(default_of(distill_schema(kDistillTrainRunDir)), "runs/distill-student");
  EXPECT_EQ(default_of(distill_schema(kDistillRunDir)), "runs/distill-run");
}

}  // namespace
}  // namespace retort::distill
