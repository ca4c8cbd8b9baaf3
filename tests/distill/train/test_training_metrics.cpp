// What a label-only run logs: "ce" (the labels' plain cross-entropy, the key distilled students log too: equal to
// the loss without smoothing, not with it), the clock on every record, metrics.csv with the same records, and
// objective.json naming the objective.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::vector<std::string>> read_csv(const fs::path& file) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream cut(line);
    for (std::string cell; std::getline(cut, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

TEST(TrainingMetrics, ALabelRunLogsCeTheClockACsvAndItsObjective) {
  for (const std::string smoothing : {"0", "0.1"}) {
    const fs::path dir = testing::fresh_dir("metrics_labels_" + smoothing);
    auto overrides = testing::tiny_overrides(dir);
    overrides.push_back("loss.label_smoothing=" + smoothing);
    run_label_training(testing::resolve(overrides), Device::cpu(), false);
    const auto records = testing::read_metrics(dir);
    ASSERT_EQ(records.size(), 6u);
    double previous_time = 0;
    for (const auto& r : records) {
      ASSERT_TRUE(r.contains("ce") && r.contains("time") && r.contains("elapsed")) << r.dump();
      if (smoothing == "0")
        EXPECT_EQ(r.at("ce").get<double>(), r.at("loss").get<double>()) << "without smoothing the loss is the CE";
      else
        EXPECT_GT(std::abs(r.at("ce").get<double>() - r.at("loss").get<double>()), 1e-4) << r.dump();
      EXPECT_GT(r.at("time").get<double>(), 1.7e9) << "Unix seconds";
      EXPECT_GE(r.at("time").get<double>(), previous_time);
      previous_time = r.at("time").get<double>();
    }
    EXPECT_LE(records[0].at("elapsed").get<double>(), records[5].at("elapsed").get<double>());

    const auto csv = read_csv(dir / "metrics.csv");
    ASSERT_EQ(csv.size(), 7u);
    ASSERT_EQ(csv[0].size(), 24u);
    EXPECT_EQ(csv[0][3], "loss");
    EXPECT_EQ(csv[0][4], "ce");
    EXPECT_EQ(csv[0][10], "eval_loss");
    for (size_t i = 0; i < 6; ++i) {
      ASSERT_EQ(csv[i + 1].size(), 24u) << i;
      EXPECT_EQ(std::stod(csv[i + 1][0]), records[i].at("step").get<double>());
      EXPECT_EQ(std::stod(csv[i + 1][3]), records[i].at("loss").get<double>());
      EXPECT_EQ(std::stod(csv[i + 1][4]), records[i].at("ce").get<double>());
      EXPECT_EQ(csv[i + 1][10].empty(), !records[i].contains("eval_loss")) << i;
    }

    std::ifstream objective_file(dir / "objective.json");
    const nlohmann::json objective = nlohmann::json::parse(objective_file);
    EXPECT_EQ(objective.at("name"), "labels");
    EXPECT_EQ(objective.at("label_smoothing").get<double>(), std::stod(smoothing));
  }
}

}  // namespace
}  // namespace retort::distill
