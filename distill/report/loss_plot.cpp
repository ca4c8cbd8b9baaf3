#include "distill/report/loss_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::distill {

namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out.push_back(c);
  }
  return out;
}

// A step of 1, 2 or 5 x 10^n that cuts [lo, hi] into about `count` intervals.
double nice_step(double lo, double hi, int count) {
  const double raw = (hi - lo) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

}  // namespace

std::string loss_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  RETORT_INPUT_CHECK(std::isfinite(x0), "the loss plot '{}' has no finite point: there is nothing to draw", o.title);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  const double left = 70, right = o.width - 20, top = 40, bottom = o.height - 50;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (right - left); };
  auto py = [&](double y) { return bottom - (y - y0) / (y1 - y0) * (bottom - top); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{3}</text>\n",
      o.width, o.height, o.width / 2, escaped(o.title));
  // Grid lines and tick labels.
  const double ys = nice_step(y0, y1, 6), xs = nice_step(x0, x1, 8);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1; y += ys)
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/><text x=\"{3}\" y=\"{4:.1f}\" "
        "text-anchor=\"end\">{5:g}</text>\n",
        left, right, py(y), left - 6, py(y) + 4, y);
  for (double x = std::ceil(x0 / xs) * xs; x <= x1; x += xs)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1f}\" y=\"{3}\" "
        "text-anchor=\"middle\">{4:g}</text>\n",
        px(x), top, bottom, bottom + 16, x);
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", left, top,
                     right - left, bottom - top);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (left + right) / 2, o.height - 12,
                     escaped(o.x_label));
  svg += fmt::format("<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     (top + bottom) / 2, escaped(o.y_label));
  // The curves, then a legend in the top-right corner.
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    std::string path;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      path += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      if (s.markers)
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x), py(y), s.color);
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} points=\"{}\"/>\n", s.color,
                       s.dashed ? " stroke-dasharray=\"6 4\"" : "", path);
    const double ly = top + 16 + 18 * static_cast<double>(i);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\"{4}/><text "
        "x=\"{5}\" y=\"{6:.1f}\" text-anchor=\"end\">{7}</text>\n",
        right - 40, right - 12, ly, s.color, s.dashed ? " stroke-dasharray=\"6 4\"" : "", right - 46, ly + 4,
        escaped(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

void write_loss_plot(const std::filesystem::path& path, const std::vector<PlotSeries>& series,
                     const PlotOptions& options) {
  write_text_atomic(path, loss_plot_svg(series, options));
}

std::vector<std::pair<double, double>> smoothed(const std::vector<std::pair<double, double>>& points, double keep) {
  std::vector<std::pair<double, double>> out;
  double average = 0, weight = 0;
  for (const auto& [x, y] : points) {
    // Bias-corrected, so the first points are not pulled toward 0.
    average = keep * average + (1 - keep) * y;
    weight = keep * weight + (1 - keep);
    out.emplace_back(x, average / weight);
  }
  return out;
}

}  // namespace retort::distill
