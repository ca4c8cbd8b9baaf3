#pragma once
// What a benchmark reports of its repeated measurements. The median is the headline: a step that a page fault,
// a clock change or a late peer slowed does not move it, where it would move the mean. The minimum is the
// best the code can do; the mean is what a long run pays.
#include <vector>

namespace retort::bench {

struct SampleSummary {
  double median = 0;
  double min = 0;
  double mean = 0;
};

// The middle sample, or the mean of the two middle ones for an even count (as Python's statistics.median,
// which the PyTorch twins use); NaN for no samples.
double median(std::vector<double> samples);

// Median, minimum and mean; NaN each for no samples.
SampleSummary summarize(const std::vector<double>& samples);

}  // namespace retort::bench
