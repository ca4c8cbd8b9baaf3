#include "apps/compare_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "apps/curve_comparison.h"
#include "apps/loss_plot.h"
#include "core/util/error.h"

namespace retort::apps {
namespace {

struct CompareArgs {
  std::string run_a, run_b, key = "loss", plot, title;
  std::vector<std::string> names;
};

void print_difference(const std::string& what, const CurveDifference& d) {
  std::cout << fmt::format(
      "  {:<10} {:>5} common steps | max relative difference {:.3g} (step {}) | mean {:.3g} | last step {:.6f} vs "
      "{:.6f}\n",
      what, d.steps, d.max_relative, d.worst_step, d.mean_relative, d.last_a, d.last_b);
}

void run(const CompareArgs& args) {
  const std::string name_a = args.names.size() == 2 ? args.names[0] : args.run_a;
  const std::string name_b = args.names.size() == 2 ? args.names[1] : args.run_b;
  const Curve a = read_metric_curve(args.run_a, args.key), b = read_metric_curve(args.run_b, args.key);
  const CurveDifference d = compare_curves(a, b);
  std::cout << fmt::format("\n  {} against {}\n", name_b, name_a);
  print_difference(args.key, d);
  // Validation losses, when both runs logged them at the same steps: the held-out view of the same question.
  Curve eval_a, eval_b;
  if (args.key == "loss") {
    try {
      eval_a = read_metric_curve(args.run_a, "eval_loss");
      eval_b = read_metric_curve(args.run_b, "eval_loss");
      print_difference("eval_loss", compare_curves(eval_a, eval_b));
    } catch (const InputError&) {
      eval_a.clear();  // a run without validations: the training curve alone
      eval_b.clear();
    }
  }
  if (args.plot.empty()) return;
  PlotOptions options;
  options.title = args.title.empty() ? fmt::format("{}: {} against {}", args.key, name_b, name_a) : args.title;
  options.title += fmt::format(" (max relative difference {:.2g})", d.max_relative);
  options.y_label = args.key == "loss" ? "loss (nats/token)" : args.key;
  // B dashed over A solid: where the curves agree, the dashes lie on the line.
  std::vector<PlotSeries> series = {{name_a, "#1f77b4", false, false, a}, {name_b, "#d62728", true, false, b}};
  if (!eval_a.empty()) {
    series.push_back({name_a + ", validation", "#1f77b4", false, true, eval_a});
    series.push_back({name_b + ", validation", "#d62728", true, true, eval_b});
  }
  write_loss_plot(args.plot, series, options);
  std::cout << fmt::format("  plot       {}\n", args.plot);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "compare two runs' metric curves step by step (max relative difference) and plot them");
  cmd->add_option("run_a", args->run_a, "the reference run directory (with metrics.jsonl)")->required();
  cmd->add_option("run_b", args->run_b, "the run directory compared against it")->required();
  cmd->add_option("--key", args->key, "the metrics.jsonl field to compare (loss, eval_loss, grad_norm, ...)");
  cmd->add_option("--plot", args->plot, "write both curves to this SVG file");
  cmd->add_option("--title", args->title, "the plot's title");
  cmd->add_option("--names", args->names, "the two runs' names in the output and the legend")->expected(2);
  cmd->callback([args] { run(*args); });
}

}  // namespace retort::apps
