#pragma once
// The measure every GPU-against-CPU comparison of the core tests uses (the kernel tests and the op table's).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::testing {

// ||out - ref|| / ||ref|| over the finite entries (the plain norm of the difference when ref is all zeros);
// infinite when out has a NaN or an infinity that ref lacks, or the other way round.
inline double relative_error(const Tensor& out, const Tensor& ref) {
  const std::vector<double> o = out.to_doubles(), r = ref.to_doubles();
  EXPECT_EQ(o.size(), r.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < o.size() && i < r.size(); ++i) {
    if (std::isfinite(r[i]) != std::isfinite(o[i])) return std::numeric_limits<double>::infinity();
    if (!std::isfinite(r[i])) continue;
    num += (o[i] - r[i]) * (o[i] - r[i]);
    den += r[i] * r[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace retort::testing
