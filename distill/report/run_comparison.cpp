#include "distill/report/run_comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "core/util/error.h"
#include "distill/report/loss_plot.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// Ten distinct colours (matplotlib's tab10), reused in order past ten runs.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

bool metrics_have_key(const fs::path& run_dir, const std::string& key) {
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains(key)) return true;
  }
  return false;
}

std::pair<double, double> best_point(const Curve& curve, bool higher) {
  auto better = [higher](const auto& a, const auto& b) { return higher ? a.second > b.second : a.second < b.second; };
  return *std::min_element(curve.begin(), curve.end(), better);  // the first of equal bests
}

std::string number_text(const nlohmann::json& value) {
  if (value.is_number_float()) return fmt::format("{:g}", value.get<double>());
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

nlohmann::json read_run_objective(const fs::path& run_dir) {
  const fs::path file = run_dir / "objective.json";
  if (fs::exists(file)) {
    std::ifstream in(file);
    const nlohmann::json objective = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    RETORT_INPUT_CHECK(objective.is_object() && objective.contains("name"),
                       "{} is not a retort objective description: the file is damaged (delete it to compare the run "
                       "as one of unknown details)",
                       file.string());
    return objective;
  }
  return {{"name", metrics_have_key(run_dir, "kd") ? "distillation" : "labels"}, {"recorded", false}};
}

std::string objective_summary(const nlohmann::json& objective) {
  std::string details;
  for (const auto& [name, value] : objective.items()) {
    if (name == "name" || name == "recorded") continue;
    details += fmt::format("{}{} {}", details.empty() ? "" : ", ", name, number_text(value));
  }
  if (objective.value("recorded", true) == false) details = "inferred: the run has no objective.json";
  const std::string name = objective.value("name", std::string("unknown"));
  return details.empty() ? name : fmt::format("{} ({})", name, details);
}

bool key_depends_on_objective(const std::string& key) {
  return key == "loss" || key == "kd";
}

bool higher_is_better(const std::string& key) {
  return key == "eval_top1_agreement" || key == "tokens_per_s" || key == "tokens";
}

RunComparison compare_runs(const RunComparisonRequest& request) {
  const size_t n = request.runs.size();
  RETORT_INPUT_CHECK(n >= 2, "retort compare needs two or more run folders, got {}", n);
  RETORT_INPUT_CHECK(request.keys.size() == 1 || request.keys.size() == n,
                     "--keys names {} key(s) for {} runs: give one key for all of them or one per run, in the runs' "
                     "order",
                     request.keys.size(), n);
  RETORT_INPUT_CHECK(request.names.empty() || request.names.size() == n,
                     "--names gives {} name(s) for {} runs: give one per run, in the runs' order", request.names.size(),
                     n);
  RunComparison comparison;
  std::vector<nlohmann::json> objectives;
  for (size_t i = 0; i < n; ++i) {
    RunCurve r;
    r.run = request.runs[i];
    r.name = request.names.empty() ? r.run.string() : request.names[i];
    r.key = request.keys.size() == 1 ? request.keys[0] : request.keys[i];
    objectives.push_back(read_run_objective(r.run));
    r.objective = objective_summary(objectives.back());
    r.curve = read_metric_curve(r.run, r.key);
    r.final_point = r.curve.back();
    r.best = best_point(r.curve, higher_is_better(r.key));
    if (metrics_have_key(r.run, "eval_loss")) r.eval_loss = read_metric_curve(r.run, "eval_loss");
    comparison.runs.push_back(std::move(r));
  }
  // The loss of one objective is not the loss of another.
  for (size_t i = 1; i < n && !request.allow_different_objectives; ++i) {
    const RunCurve &a = comparison.runs[0], &b = comparison.runs[i];
    const std::string& key = key_depends_on_objective(a.key) ? a.key : b.key;
    if (objectives[i] == objectives[0] || !key_depends_on_objective(key)) continue;
    throw InputError(fmt::format(
        "retort compare: {} was trained on {} and {} on {}: their \"{}\" measures different things. Compare a key "
        "that means the same for both (--key ce: the labels' cross-entropy, which every run logs; --key eval_loss: "
        "the held-out one), or pass --allow-different-objectives to compare \"{}\" anyway",
        a.run.string(), a.objective, b.run.string(), b.objective, key, key));
  }
  std::set<double> common;
  for (const auto& [step, value] : comparison.runs[0].eval_loss) common.insert(step);
  for (size_t i = 1; i < n; ++i) {
    std::set<double> theirs;
    for (const auto& [step, value] : comparison.runs[i].eval_loss)
      if (common.count(step)) theirs.insert(step);
    common = std::move(theirs);
  }
  comparison.common_eval_steps.assign(common.begin(), common.end());
  if (n == 2) {
    comparison.key = compare_curves(comparison.runs[0].curve, comparison.runs[1].curve);
    if (!comparison.common_eval_steps.empty())
      comparison.eval_loss = compare_curves(comparison.runs[0].eval_loss, comparison.runs[1].eval_loss);
  }
  if (request.plot.empty()) return comparison;

  std::set<std::string> keys;
  for (const RunCurve& r : comparison.runs) keys.insert(r.key);
  std::string key_list;
  for (const std::string& k : keys) key_list += (key_list.empty() ? "" : ", ") + k;
  PlotOptions options;
  if (!request.title.empty()) {
    options.title = request.title;
  } else if (n == 2) {
    options.title = fmt::format("{}: {} against {}", key_list, comparison.runs[1].name, comparison.runs[0].name);
  } else {
    options.title = fmt::format("{} of {} runs", key_list, n);
  }
  if (comparison.key) options.title += fmt::format(" (max relative difference {:.2g})", comparison.key->max_relative);
  options.y_label = keys.size() == 1 && (*keys.begin() == "loss" || *keys.begin() == "ce")
                        ? *keys.begin() + " (nats/token)"
                        : key_list;
  // Validation curves beside training curves in the same units: the loss and the labels' cross-entropy.
  const bool with_validation =
      std::all_of(keys.begin(), keys.end(), [](const std::string& k) { return k == "loss" || k == "ce"; });
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < n; ++i) {
    const RunCurve& r = comparison.runs[i];
    // Two runs: the second dashed over the first, so where the curves agree the dashes lie on the line.
    series.push_back({r.name, kColors[i % std::size(kColors)], n == 2 && i == 1, false, r.curve});
  }
  if (with_validation)
    for (size_t i = 0; i < n; ++i) {
      const RunCurve& r = comparison.runs[i];
      if (!r.eval_loss.empty())
        series.push_back({r.name + ", validation", kColors[i % std::size(kColors)], true, true, r.eval_loss});
    }
  write_loss_plot(request.plot, series, options);
  return comparison;
}

}  // namespace retort::distill
