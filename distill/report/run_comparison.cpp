#include "distill/report/run_comparison.h"

#include <fmt/format.h>

#include "core/util/error.h"
#include "distill/report/loss_plot.h"

namespace retort::distill {

RunComparison compare_runs(const RunComparisonRequest& request) {
  RunComparison comparison;
  comparison.name_a = request.name_a.empty() ? request.run_a.string() : request.name_a;
  comparison.name_b = request.name_b.empty() ? request.run_b.string() : request.name_b;
  const Curve a = read_metric_curve(request.run_a, request.key), b = read_metric_curve(request.run_b, request.key);
  comparison.key = compare_curves(a, b);
  Curve eval_a, eval_b;
  if (request.key == "loss") {
    try {
      eval_a = read_metric_curve(request.run_a, "eval_loss");
      eval_b = read_metric_curve(request.run_b, "eval_loss");
      comparison.eval_loss = compare_curves(eval_a, eval_b);
    } catch (const InputError&) {
      eval_a.clear();  // a run without validations: the training curve alone
      eval_b.clear();
    }
  }
  if (request.plot.empty()) return comparison;
  PlotOptions options;
  options.title = request.title.empty()
                      ? fmt::format("{}: {} against {}", request.key, comparison.name_b, comparison.name_a)
                      : request.title;
  options.title += fmt::format(" (max relative difference {:.2g})", comparison.key.max_relative);
  options.y_label = request.key == "loss" ? "loss (nats/token)" : request.key;
  // B dashed over A solid: where the curves agree, the dashes lie on the line.
  std::vector<PlotSeries> series = {{comparison.name_a, "#1f77b4", false, false, a},
                                    {comparison.name_b, "#d62728", true, false, b}};
  if (!eval_a.empty()) {
    series.push_back({comparison.name_a + ", validation", "#1f77b4", false, true, eval_a});
    series.push_back({comparison.name_b + ", validation", "#d62728", true, true, eval_b});
  }
  write_loss_plot(request.plot, series, options);
  return comparison;
}

}  // namespace retort::distill
