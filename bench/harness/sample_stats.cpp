#include "bench/harness/sample_stats.h"

#include <algorithm>
#include <limits>

namespace retort::bench {

double median(std::vector<double> samples) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

SampleSummary summarize(const std::vector<double>& samples) {
  if (samples.empty()) {
    const double none = std::numeric_limits<double>::quiet_NaN();
    return {none, none, none};
  }
  double mean = 0;
  for (double s : samples) mean += s / static_cast<double>(samples.size());  // no overflow of a running sum
  return {median(samples), *std::min_element(samples.begin(), samples.end()), mean};
}

}  // namespace retort::bench
