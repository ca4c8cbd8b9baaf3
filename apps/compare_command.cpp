#include "apps/compare_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "core/util/error.h"
#include "distill/report/run_comparison.h"

namespace retort::apps {
namespace {

struct CompareArgs {
  distill::RunComparisonRequest request;
  std::string key;
  std::vector<std::string> keys;
};

void print_difference(const std::string& what, const distill::CurveDifference& d) {
  std::cout << fmt::format(
      "  {:<10} {:>5} common steps | max relative difference {:.3g} (step {}) | mean {:.3g} | last step {:.6f} vs "
      "{:.6f}\n",
      what, d.steps, d.max_relative, d.worst_step, d.mean_relative, d.last_a, d.last_b);
}

void print_table(const distill::RunComparison& c) {
  size_t name_width = 4, objective_width = 9;
  for (const auto& r : c.runs) {
    name_width = std::max(name_width, r.name.size());
    objective_width = std::max(objective_width, r.objective.size());
  }
  std::cout << fmt::format("\n  {:<{}}  {:<12} {:>14} {:>8} {:>14} {:>8}  {}\n", "run", name_width, "key", "final",
                           "(step)", "best", "(step)", "objective");
  for (const auto& r : c.runs)
    std::cout << fmt::format("  {:<{}}  {:<12} {:>14.6f} {:>8g} {:>14.6f} {:>8g}  {}\n", r.name, name_width, r.key,
                             r.final_point.second, r.final_point.first, r.best.second, r.best.first, r.objective);
  if (c.common_eval_steps.empty()) return;
  // At most a dozen rows: evenly spread, the first and the last always among them.
  std::vector<double> steps = c.common_eval_steps;
  if (steps.size() > 12) {
    std::vector<double> kept;
    for (size_t i = 0; i < 12; ++i) kept.push_back(steps[i * (steps.size() - 1) / 11]);
    steps = kept;
  }
  std::cout << fmt::format("\n  eval_loss at the steps every run validated ({} of {} shown)\n  {:>8}", steps.size(),
                           c.common_eval_steps.size(), "step");
  for (const auto& r : c.runs) std::cout << fmt::format(" {:>14.14}", r.name);
  std::cout << "\n";
  for (double step : steps) {
    std::cout << fmt::format("  {:>8g}", step);
    for (const auto& r : c.runs) {
      const auto it =
          std::find_if(r.eval_loss.begin(), r.eval_loss.end(), [&](const auto& p) { return p.first == step; });
      std::cout << fmt::format(" {:>14.6f}", it->second);
    }
    std::cout << "\n";
  }
}

void run(CompareArgs& args) {
  RETORT_INPUT_CHECK(args.key.empty() || args.keys.empty(),
                     "--key and --keys both given: use --key K for every run or --keys K1,K2,... for one per run");
  if (!args.keys.empty()) args.request.keys = args.keys;
  if (!args.key.empty()) args.request.keys = {args.key};
  const distill::RunComparison c = distill::compare_runs(args.request);
  print_table(c);
  if (c.key) {
    std::cout << fmt::format("\n  {} against {}\n", c.runs[1].name, c.runs[0].name);
    print_difference(c.runs[0].key == c.runs[1].key ? c.runs[0].key : c.runs[1].key + "/" + c.runs[0].key, *c.key);
    if (c.eval_loss) print_difference("eval_loss", *c.eval_loss);
  }
  if (!args.request.plot.empty()) std::cout << fmt::format("  plot       {}\n", args.request.plot.string());
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  distill::RunComparisonRequest& r = args->request;
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "compare two or more runs' metric curves: final and best values, validation loss at common steps, and for two "
      "runs the max relative difference step by step; plot them");
  cmd->add_option("runs", r.runs, "the run folders (with metrics.jsonl); the first is the reference")
      ->required()
      ->expected(2, 1 << 16);
  cmd->add_option("--key", args->key,
                  "the metrics.jsonl field compared for every run (default loss; ce, eval_loss, ...)");
  cmd->add_option("--keys", args->keys, "one field per run, in the runs' order (e.g. --keys loss,ce)")->delimiter(',');
  cmd->add_option("--plot", r.plot, "write every curve to this SVG file");
  cmd->add_option("--title", r.title, "the plot's title");
  cmd->add_option("--names", r.names, "the runs' names in the output and the legend, one per run");
  cmd->add_flag("--allow-different-objectives", r.allow_different_objectives,
                "compare \"loss\" (or \"kd\") of runs trained on different objectives (labels, top-k cache, online), "
                "which measure different things");
  cmd->callback([args] { run(*args); });
}

}  // namespace retort::apps
