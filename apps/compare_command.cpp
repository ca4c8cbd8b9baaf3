#include "apps/compare_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "distill/report/run_comparison.h"

namespace retort::apps {
namespace {

struct CompareArgs {
  distill::RunComparisonRequest request;
  std::vector<std::string> names;
};

void print_difference(const std::string& what, const distill::CurveDifference& d) {
  std::cout << fmt::format(
      "  {:<10} {:>5} common steps | max relative difference {:.3g} (step {}) | mean {:.3g} | last step {:.6f} vs "
      "{:.6f}\n",
      what, d.steps, d.max_relative, d.worst_step, d.mean_relative, d.last_a, d.last_b);
}

void run(CompareArgs& args) {
  if (args.names.size() == 2) {
    args.request.name_a = args.names[0];
    args.request.name_b = args.names[1];
  }
  const distill::RunComparison c = distill::compare_runs(args.request);
  std::cout << fmt::format("\n  {} against {}\n", c.name_b, c.name_a);
  print_difference(args.request.key, c.key);
  if (c.eval_loss) print_difference("eval_loss", *c.eval_loss);
  if (!args.request.plot.empty()) std::cout << fmt::format("  plot       {}\n", args.request.plot.string());
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  distill::RunComparisonRequest& r = args->request;
  CLI::App* cmd = app.add_subcommand(
      "compare", "compare two runs' metric curves step by step (max relative difference) and plot them");
  cmd->add_option("run_a", r.run_a, "the reference run directory (with metrics.jsonl)")->required();
  cmd->add_option("run_b", r.run_b, "the run directory compared against it")->required();
  cmd->add_option("--key", r.key, "the metrics.jsonl field to compare (loss, eval_loss, grad_norm, ...)");
  cmd->add_option("--plot", r.plot, "write both curves to this SVG file");
  cmd->add_option("--title", r.title, "the plot's title");
  cmd->add_option("--names", args->names, "the two runs' names in the output and the legend")->expected(2);
  cmd->callback([args] { run(*args); });
}

}  // namespace retort::apps
