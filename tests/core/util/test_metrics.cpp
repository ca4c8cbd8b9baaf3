// metrics.jsonl: one object per line, visible on disk as soon as written, and no duplicates after a resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "core/util/metrics_writer.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using ::retort::testing::TempFolder;

std::vector<nlohmann::json> records_in(const std::filesystem::path& path) {
  std::vector<nlohmann::json> records;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

class MetricsTest : public ::testing::Test {
 protected:
  TempFolder folder_;
  const std::filesystem::path path_ = folder_.path() / "metrics.jsonl";
};

TEST_F(MetricsTest, AppendsOneObjectPerLineImmediately) {
  MetricsWriter writer = MetricsWriter::create(path_);
  writer.write(1, {{"loss", 2.5}, {"lr", 1e-3}});
  // Already on disk while the writer is still open: a crash now would keep it.
  ASSERT_EQ(records_in(path_).size(), 1u);
  writer.write({{"step", 2}, {"eval_loss", 2.0}});
  const auto records = records_in(path_);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["step"], 1);
  EXPECT_EQ(records[0]["loss"], 2.5);
  EXPECT_EQ(records[1]["eval_loss"], 2.0);
  EXPECT_EQ(read_file(path_).substr(0, 9), R"({"step":1)");  // step first for the step-keyed form
  EXPECT_THROW(writer.write(nlohmann::json::array({1, 2})), Error);
}

TEST_F(MetricsTest, CreateReplacesAnOldFile) {
  write_text_atomic(path_, "{\"step\": 99}\n");
  MetricsWriter writer = MetricsWriter::create(path_);
  writer.write(1, {{"loss", 1.0}});
  ASSERT_EQ(records_in(path_).size(), 1u);
}

TEST_F(MetricsTest, ResumeDropsLaterStepsAndTornLinesThenAppends) {
  {
    MetricsWriter writer = MetricsWriter::create(path_);
    for (int step = 1; step <= 6; ++step) writer.write(step, {{"loss", 10.0 - step}});
    writer.write({{"event", "started"}});  // a record without a step is kept
  }
  // A crash in the middle of a write leaves a torn last line.
  {
    std::string content = read_file(path_) + R"({"step": 7, "lo)";
    write_text_atomic(path_, content);
  }
  {
    MetricsWriter writer = MetricsWriter::resume(path_, 4);  // the checkpoint was at step 4
    for (int step = 5; step <= 6; ++step) writer.write(step, {{"loss", 20.0 + step}});
  }
  const auto records = records_in(path_);
  std::vector<int> steps;
  for (const auto& record : records) {
    if (record.contains("step")) steps.push_back(record["step"]);
  }
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(records.back()["loss"], 26.0);  // the resumed run's values, not the lost ones
  EXPECT_EQ(records.size(), 7u);            // plus the event line
}

TEST_F(MetricsTest, ResumeWithoutAFileStartsOne) {
  MetricsWriter writer = MetricsWriter::resume(path_, 10);
  writer.write(11, {{"loss", 1.0}});
  EXPECT_EQ(records_in(path_).size(), 1u);
}

}  // namespace
}  // namespace retort
