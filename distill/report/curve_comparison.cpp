#include "distill/report/curve_comparison.h"

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/util/error.h"

namespace retort::distill {

Curve read_metric_curve(const std::filesystem::path& run_dir, const std::string& key) {
  const std::filesystem::path file = run_dir / "metrics.jsonl";
  std::ifstream in(file);
  RETORT_INPUT_CHECK(in.good(), "{} cannot be read: is {} the directory of a finished run?", file.string(),
                     run_dir.string());
  std::map<double, double> by_step;  // a resumed run may log a step again: its last record counts
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      RETORT_INPUT_CHECK(false, "{} line {} is not JSON ({}): the file is damaged", file.string(), line_number,
                         e.what());
    }
    RETORT_INPUT_CHECK(record.contains("step"), "{} line {} has no \"step\": not a retort metrics file", file.string(),
                       line_number);
    if (record.contains(key) && record.at(key).is_number())
      by_step[record.at("step").get<double>()] = record.at(key).get<double>();
  }
  RETORT_INPUT_CHECK(!by_step.empty(), "{} holds no record with \"{}\": choose another key (loss, eval_loss, ...)",
                     file.string(), key);
  return Curve(by_step.begin(), by_step.end());
}

CurveDifference compare_curves(const Curve& a, const Curve& b) {
  std::map<double, double> b_by_step(b.begin(), b.end());
  CurveDifference d;
  double sum = 0;
  for (const auto& [step, value_a] : a) {
    const auto it = b_by_step.find(step);
    if (it == b_by_step.end()) continue;
    const double relative = std::abs(it->second - value_a) / std::abs(value_a);
    if (d.steps == 0 || relative > d.max_relative) {
      d.max_relative = relative;
      d.worst_step = step;
    }
    sum += relative;
    ++d.steps;
    d.last_a = value_a;
    d.last_b = it->second;
  }
  RETORT_INPUT_CHECK(d.steps > 0, "the two curves share no step: compare runs that log the same steps");
  d.mean_relative = sum / static_cast<double>(d.steps);
  return d;
}

}  // namespace retort::distill
