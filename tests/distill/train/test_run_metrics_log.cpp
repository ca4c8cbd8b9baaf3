// metrics.jsonl and metrics.csv of a run: the clock on every record, a CSV with a fixed header holding the same
// records, and a resumed run that drops the lost steps from both files and continues the elapsed time.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "distill/train/run_metrics_log.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using retort::testing::read_bytes;
using retort::testing::TempFolder;

std::vector<std::string> lines_of(const fs::path& file) {
  std::istringstream in(read_bytes(file));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(RunMetricsLog, EveryRecordHasTheClockAndTheCsvTheSameValues) {
  TempFolder dir;
  const double before = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count()) /
                        1000.0;
  {
    RunMetricsLog log = RunMetricsLog::create(dir.path());
    log.write(1, {{"loss", 4.5}, {"lr", 0.001}});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.write(2, {{"loss", 4.25}, {"ce", 4.0}, {"eval_loss", 4.125}});
  }
  const auto jsonl = lines_of(dir.path() / "metrics.jsonl");
  ASSERT_EQ(jsonl.size(), 2u);
  const auto first = nlohmann::json::parse(jsonl[0]), second = nlohmann::json::parse(jsonl[1]);
  EXPECT_GE(first.at("time").get<double>(), before - 0.001);
  EXPECT_LT(first.at("time").get<double>(), before + 60);
  EXPECT_GE(second.at("elapsed").get<double>() - first.at("elapsed").get<double>(), 0.019);
  const auto csv = lines_of(dir.path() / "metrics.csv");
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[0],
            "step,time,elapsed,loss,ce,kd,lr,grad_norm,tokens_per_s,tokens,eval_loss,eval_ppl,eval_kl_to_teacher,"
            "eval_top1_agreement,chunk_coverage,chunks,xtoken_batch_ms,teacher_ms,batch_kind,on_policy_reverse_kl,"
            "on_policy_forward_kl,on_policy_mixed,eval_on_policy_reverse_kl,eval_on_policy_forward_kl");
  EXPECT_EQ(csv[2],
            "2," + second.at("time").dump() + "," + second.at("elapsed").dump() + ",4.25,4.0,,,,,,4.125,,,,,,,,,,,,,");
}

TEST(RunMetricsLog, AResumedRunDropsTheLostStepsFromBothFilesAndContinuesTheElapsedTime) {
  TempFolder dir;
  {
    RunMetricsLog log = RunMetricsLog::create(dir.path());
    for (int step = 1; step <= 5; ++step) log.write(step, {{"loss", 5.0 - step}});
  }
  // Pretend step 3 had taken 100 s of training.
  auto jsonl = lines_of(dir.path() / "metrics.jsonl");
  auto third = nlohmann::json::parse(jsonl[2]);
  third["elapsed"] = 100.0;
  jsonl[2] = third.dump();
  std::string text;
  for (const auto& line : jsonl) text += line + "\n";
  retort::testing::write_bytes(dir.path() / "metrics.jsonl", text);
  {
    RunMetricsLog log = RunMetricsLog::resume(dir.path(), 3);
    log.write(4, {{"loss", 0.5}});
  }
  const auto after = lines_of(dir.path() / "metrics.jsonl");
  ASSERT_EQ(after.size(), 4u);
  const auto fourth = nlohmann::json::parse(after[3]);
  EXPECT_EQ(fourth.at("loss").get<double>(), 0.5);
  EXPECT_GE(fourth.at("elapsed").get<double>(), 100.0);
  EXPECT_LT(fourth.at("elapsed").get<double>(), 160.0);
  const auto csv = lines_of(dir.path() / "metrics.csv");
  ASSERT_EQ(csv.size(), 5u) << "header + steps 1, 2, 3 and the new 4";
  EXPECT_EQ(csv[3].substr(0, 2), "3,");
  EXPECT_EQ(csv[4].substr(0, 2), "4,");
  EXPECT_NE(csv[4].find(",0.5,"), std::string::npos);
}

TEST(RunMetricsLog, AFieldWithoutAColumnIsAnError) {
  EXPECT_THROW(metrics_csv_line({{"step", 1}, {"surprise", 2.0}}), Error);
}

}  // namespace
}  // namespace retort::distill
