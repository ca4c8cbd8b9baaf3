#pragma once
// `retort compare`: two runs' metric curves step by step and, for the training loss, their validation curves too
// (the held-out view of the same question), with an optional SVG plot of both.
#include <filesystem>
#include <optional>
#include <string>

#include "distill/report/curve_comparison.h"

namespace retort::distill {

struct RunComparisonRequest {
  std::filesystem::path run_a, run_b;  // the reference run and the run compared against it
  std::string key = "loss";            // the metrics.jsonl field
  std::string name_a, name_b;          // names in the plot's legend; empty: the folders
  std::filesystem::path plot;          // an SVG file to write; empty: none
  std::string title;                   // the plot's title; empty: a generated one
};

struct RunComparison {
  std::string name_a, name_b;
  CurveDifference key;
  std::optional<CurveDifference> eval_loss;  // when key is "loss" and both runs logged validations
};

RunComparison compare_runs(const RunComparisonRequest& request);

}  // namespace retort::distill
