#pragma once
// Two training runs' loss curves side by side, step by step: the check that a tensor-parallel run follows the
// same run at tp 1 (docs/parallel.md), and the data of `retort compare`'s plot.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace retort::distill {

using Curve = std::vector<std::pair<double, double>>;  // (step, value), steps ascending

// (step, key) of every metrics.jsonl record of run_dir that has the key; a step logged twice keeps its last
// record. An error names the file when it is missing, unreadable, or holds no record with the key.
Curve read_metric_curve(const std::filesystem::path& run_dir, const std::string& key);

struct CurveDifference {
  int64_t steps = 0;              // steps present in both curves
  double max_relative = 0;        // max over those steps of |b - a| / |a|
  double worst_step = 0;          // where it is reached (the first such step)
  double mean_relative = 0;       // mean over those steps of |b - a| / |a|
  double last_a = 0, last_b = 0;  // both values at the last common step
};

// Compares b against a on the steps both have. No common step is an error.
CurveDifference compare_curves(const Curve& a, const Curve& b);

}  // namespace retort::distill
