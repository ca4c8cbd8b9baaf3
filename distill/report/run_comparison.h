#pragma once
// `retort compare`: two or more runs' metric curves side by side. Per run: the final value of its key, the best
// value and where it was reached, and the validation loss at the steps every run validated; for two runs, how far
// the second's curve is from the first's step by step (the check that a tp 4 run follows the same run at tp 1); an
// optional SVG plot of every curve.
// A run's "loss" is what its objective optimises (the labels' cross-entropy, a top-k KD mix, an online KL...), so
// comparing the loss (or "kd") of runs trained on different objectives compares different quantities: it is refused
// unless asked for. "ce", "eval_loss" and the other keys mean the same for every objective.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "distill/report/curve_comparison.h"

namespace retort::distill {

struct RunComparisonRequest {
  std::vector<std::filesystem::path> runs;  // two or more run folders; the first is the reference
  std::vector<std::string> keys{"loss"};    // metrics.jsonl fields: one for every run, or one per run
  std::vector<std::string> names;           // names in the table and the legend (one per run); empty: the folders
  std::filesystem::path plot;               // an SVG file to write; empty: none
  std::string title;                        // the plot's title; empty: a generated one
  bool allow_different_objectives = false;  // compare the loss of runs trained on different objectives anyway
};

struct RunCurve {
  std::string name;
  std::filesystem::path run;
  std::string key;
  std::string objective;  // a one-line summary of objective.json (objective_summary)
  Curve curve;
  std::pair<double, double> final_point, best;  // (step, value); best: the lowest, or the highest for a key where
                                                // more is better (higher_is_better)
  Curve eval_loss;                              // empty when the run logged no validation
};

struct RunComparison {
  std::vector<RunCurve> runs;
  std::vector<double> common_eval_steps;     // the steps at which every run logged eval_loss
  std::optional<CurveDifference> key;        // two runs: the second's curve against the first's
  std::optional<CurveDifference> eval_loss;  // two runs that both logged validations at common steps
};

// The run's objective.json (written by the training loop); a run from before it existed gets one inferred from its
// metrics ({"name": "labels"} or {"name": "distillation"}, with "recorded": false).
nlohmann::json read_run_objective(const std::filesystem::path& run_dir);

// "topk_cache (divergence forward_kl_rest, k 64, kd_ratio 0.9, temperature 1)".
std::string objective_summary(const nlohmann::json& objective);

// Keys whose values mean something else under another objective: "loss" and "kd".
bool key_depends_on_objective(const std::string& key);

// Keys where a larger value is better (top-1 agreement, throughput); for the rest the best value is the lowest.
bool higher_is_better(const std::string& key);

// Errors (InputError) name the problem and the flag that fixes it: fewer than two runs, a key count that is neither
// 1 nor the run count, a missing metrics file or key, different objectives on an objective-dependent key.
RunComparison compare_runs(const RunComparisonRequest& request);

}  // namespace retort::distill
