#include "distill/compare/comparison_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "core/util/human_format.h"
#include "distill/pipeline/stage_runs.h"
#include "distill/report/loss_plot.h"

namespace retort::distill {

namespace {

std::string optional_cell(const std::optional<double>& value, const char* format) {
  return value ? fmt::format(fmt::runtime(format), *value) : std::string("-");
}

}  // namespace

nlohmann::json comparison_json(const ComparisonReport& r) {
  nlohmann::json teacher{{"dir", r.teacher_dir.string()},      {"trained", r.teacher_trained},
                         {"seconds", r.teacher_seconds},       {"loss", r.teacher.loss},
                         {"perplexity", r.teacher.perplexity}, {"tokens", r.teacher.tokens}};
  if (r.teacher.bits_per_byte) teacher["bits_per_byte"] = *r.teacher.bits_per_byte;
  nlohmann::json methods = nlohmann::json::array();
  for (const MethodResult& m : r.methods) methods.push_back(method_result_json(m));
  return {{"run_dir", r.run_dir.string()},
          {"student_steps", r.student_steps},
          {"teacher", teacher},
          {"methods", methods},
          {"total_seconds", r.total_seconds}};
}

std::string comparison_markdown(const ComparisonReport& r) {
  std::string out = fmt::format(
      "Every student: the same shape, data, seed and {} steps, from the same teacher; scored on {} held-out "
      "tokens.\n\n",
      r.student_steps, r.teacher.tokens);
  out +=
      "| method | held-out loss (nats/token) | bits/byte | KL(teacher \\|\\| student) | top-1 agreement | cache "
      "bytes/token "
      "| wall time |\n|---|---:|---:|---:|---:|---:|---:|\n";
  out += fmt::format("| teacher (reference) | {:.4f} | {} | - | - | - | {} |\n", r.teacher.loss,
                     optional_cell(r.teacher.bits_per_byte, "{:.4f}"),
                     r.teacher_trained ? format_duration(r.teacher_seconds) : std::string("(reused)"));
  std::string notes;
  for (const MethodResult& m : r.methods) {
    if (!m.available) {
      out += fmt::format("| {} | not available in this build | | | | | |\n", m.title);
      const std::string first_line = m.unavailable_reason.substr(0, m.unavailable_reason.find('\n'));
      notes += fmt::format("- {} (`{}`): {}\n", m.title, fmt::join(m.overrides, " "), first_line);
      continue;
    }
    out += fmt::format("| {} | {:.4f} | {} | {} | {} | {:.1f} | {}{} |\n", m.title, m.eval.loss,
                       optional_cell(m.eval.bits_per_byte, "{:.4f}"), optional_cell(m.eval.kl_to_teacher, "{:.4f}"),
                       m.eval.top1_agreement ? fmt::format("{:.1f}%", 100 * *m.eval.top1_agreement) : "-",
                       m.cache_bytes_per_token, format_duration(m.wall_seconds()),
                       m.cache_seconds > 0 ? fmt::format(" (cache {})", format_duration(m.cache_seconds)) : "");
  }
  if (!notes.empty()) out += "\nNot available in this build:\n" + notes;
  return out;
}

void write_comparison_outputs(const ComparisonReport& r) {
  write_text_atomic(r.run_dir / "compare.json", comparison_json(r).dump(2));
  write_text_atomic(r.run_dir / "compare.md", comparison_markdown(r));
  // Colours of the matplotlib default cycle, one per method in the table's order.
  static const std::vector<std::string> colors{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                               "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < r.methods.size(); ++i) {
    const MethodResult& m = r.methods[i];
    if (!m.available) continue;
    series.push_back({m.title, colors[i % colors.size()], false, true, metric_curve(m.student_dir, "eval_loss")});
  }
  PlotOptions plot;
  plot.title = "distill compare: held-out loss of each method's student";
  plot.y_label = "held-out loss (nats/token)";
  write_loss_plot(r.run_dir / "compare_curves.svg", series, plot);
}

}  // namespace retort::distill
