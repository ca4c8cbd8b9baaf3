#pragma once
// A line chart of loss curves as a standalone SVG file (no plotting library: the run directory gets a picture any
// browser opens).
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace retort::distill {

struct PlotSeries {
  std::string name;
  std::string color;  // any SVG colour, e.g. "#1f77b4"
  bool dashed = false;
  bool markers = false;                           // a dot on every point (sparse series such as validations)
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct PlotOptions {
  std::string title;
  std::string x_label = "step";
  std::string y_label = "loss (nats/token)";
  int width = 800, height = 480;
};

// The SVG text of the chart; the axes span every finite point of every series.
std::string loss_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

// Writes loss_plot_svg() atomically.
void write_loss_plot(const std::filesystem::path& path, const std::vector<PlotSeries>& series,
                     const PlotOptions& options);

// An exponential moving average of the y values (noisy per-step losses), weight `keep` on the past.
std::vector<std::pair<double, double>> smoothed(const std::vector<std::pair<double, double>>& points, double keep);

}  // namespace retort::distill
