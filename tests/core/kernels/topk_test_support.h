#pragma once
// Shared by the top-k kernel tests: rows of test values and the float64 reference (a full sort by value, then
// by column) written out here, independent of the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::topk_testing {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Values { Normal, FewLevels, WithNegInf };

// rows x cols values exactly representable in `dtype`: normal draws, a handful of levels (heavy ties), or
// normal draws with a quarter of the entries -inf (and one whole row -inf when there are several rows).
inline std::vector<double> make_rows(int64_t rows, int64_t cols, Values kind, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> level(-2, 2);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (auto& x : v) {
    x = kind == Values::FewLevels ? 0.5 * level(gen) : normal(gen);
    if (kind == Values::WithNegInf && u(gen) < 0.25) x = -kInf;
  }
  if (kind == Values::WithNegInf && rows > 1) std::fill_n(v.begin() + cols, cols, -kInf);
  // Round through the tensor's dtype so the reference sees exactly the stored values.
  return Tensor::from_doubles(v, {rows, cols}, DType::F64).to(dtype).to_doubles();
}

struct Reference {
  std::vector<double> values;
  std::vector<int32_t> indices;
  std::vector<double> lse;
};

inline Reference reference_topk(const std::vector<double>& x, int64_t rows, int64_t cols, int64_t k) {
  Reference ref;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    std::vector<int32_t> order(static_cast<size_t>(cols));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int64_t i = 0; i < k; ++i) {
      ref.indices.push_back(order[static_cast<size_t>(i)]);
      ref.values.push_back(row[order[static_cast<size_t>(i)]]);
    }
    const double m = *std::max_element(row, row + cols);
    double s = 0;
    if (m != -kInf)
      for (int64_t j = 0; j < cols; ++j) s += std::exp(row[j] - m);
    ref.lse.push_back(m == -kInf ? -kInf : m + std::log(s));
  }
  return ref;
}

}  // namespace retort::topk_testing
