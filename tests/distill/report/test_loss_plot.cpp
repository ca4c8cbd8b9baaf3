// The SVG loss chart of `retort distill run`: one curve per series, points placed on the axes' scale, legend
// entries, escaped text; the moving average that smooths per-step losses.
#include <gtest/gtest.h>

#include <regex>

#include "core/util/error.h"
#include "distill/report/loss_plot.h"

namespace retort::distill {
namespace {

TEST(LossPlot, CurvesSpanThePlotAreaAndCarryTheirNames) {
  PlotOptions options;
  options.title = "a < b & c";
  options.width = 800;
  options.height = 480;
  const std::string svg = loss_plot_svg(
      {{"first", "#d62728", false, false, {{0, 4}, {10, 2}}}, {"second", "#1f77b4", true, true, {{5, 3}, {10, 3}}}},
      options);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  EXPECT_NE(svg.find(">first</text>"), std::string::npos);
  EXPECT_NE(svg.find(">second</text>"), std::string::npos);
  std::vector<std::string> polylines;
  const std::regex points_re("<polyline[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), points_re); it != std::sregex_iterator(); ++it)
    polylines.push_back((*it)[1]);
  ASSERT_EQ(polylines.size(), 2u);
  // x spans [0, 10] over the plot area [70, width - 20]; y spans [2, 4] padded by 5% over [40, height - 50],
  // upside down.
  const double pad = 0.1, y_low = 2 - pad, y_high = 4 + pad;
  auto py = [&](double y) { return 430 - (y - y_low) / (y_high - y_low) * 390; };
  EXPECT_EQ(polylines[0], fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", 70.0, py(4), 780.0, py(2)));
  EXPECT_EQ(polylines[1], fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", 425.0, py(3), 780.0, py(3)));
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find("<circle"), std::string::npos);
}

TEST(LossPlot, NothingToDrawIsAnError) {
  EXPECT_THROW(loss_plot_svg({{"empty", "red", false, false, {}}}, {}), InputError);
}

TEST(LossPlot, SmoothingIsABiasCorrectedMovingAverage) {
  const auto out = smoothed({{1, 4}, {2, 2}, {3, 6}}, 0.5);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_DOUBLE_EQ(out[0].second, 4);  // no pull toward 0
  EXPECT_DOUBLE_EQ(out[1].second, (0.25 * 4 + 0.5 * 2) / 0.75);
  EXPECT_DOUBLE_EQ(out[2].second, (0.125 * 4 + 0.25 * 2 + 0.5 * 6) / 0.875);
  EXPECT_EQ(out[2].first, 3);
}

}  // namespace
}  // namespace retort::distill
