#pragma once
// Gradient checks against central finite differences in float64: the analytic gradient of
// L = sum(f(inputs) * R), for a fixed random R, must match (L(x + h e_i) - L(x - h e_i)) / 2h.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::testing {

inline Tensor random_tensor(const Shape& shape, std::mt19937_64& rng, double scale = 1.0, DType dtype = DType::F64,
                            Device device = Device::cpu()) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = normal(rng);
  return Tensor::from_doubles(values, shape, dtype, device);
}

inline double weighted_sum(const Tensor& y, const std::vector<double>& r) {
  auto v = y.to_doubles();
  double total = 0;
  for (size_t i = 0; i < v.size(); ++i) total += v[i] * r[i];
  return total;
}

// Checks d/d(inputs[i]) for every input that requires a gradient. Inputs must be f64 CPU tensors.
inline void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   std::vector<Tensor> inputs, double tolerance = 1e-6, uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  Tensor y = f(inputs);
  Tensor r = random_tensor(y.shape(), rng);
  const std::vector<double> rv = r.to_doubles();
  for (Tensor& t : inputs) t.zero_grad();
  y.backward(r);
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
    ASSERT_TRUE(x.grad().defined()) << "input " << i << " got no gradient";
    const std::vector<double> analytic = x.grad().to_doubles();
    double* data = x.data<double>();
    double max_err = 0, max_ref = 1e-3;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = data[j];
      data[j] = saved + h;
      const double plus = weighted_sum(f(inputs), rv);
      data[j] = saved - h;
      const double minus = weighted_sum(f(inputs), rv);
      data[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - analytic[j]));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LT(max_err / max_ref, tolerance)
        << "input " << i << ": max |analytic - numeric| = " << max_err << " (scale " << max_ref << ")";
  }
}

}  // namespace retort::testing
