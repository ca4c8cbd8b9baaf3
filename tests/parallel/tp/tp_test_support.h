#pragma once
// Shared by the tensor-parallel tests: deterministic host matrices, float64 reference products written out
// here, and comparisons of a rank's local tensor with the slice of a dense reference it should hold.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::tp_testing {

// Every shape of the tests that loop over these divides by 8.
constexpr int kTpSizes[] = {1, 2, 4, 8};

// Row-major [rows, cols] of doubles.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

// Values exactly representable in f32, so a tensor made from them holds what the reference uses.
inline Mat random_mat(int64_t rows, int64_t cols, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  Mat m(rows, cols);
  for (auto& x : m.v) x = static_cast<float>(normal(gen));
  return m;
}

inline Tensor to_tensor(const Mat& m, DType dtype = DType::F32) {
  return Tensor::from_doubles(m.v, {m.rows, m.cols}, dtype);
}

// a @ b^T
inline Mat matmul_nt(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < a.cols; ++k) acc += a.at(i, k) * b.at(j, k);
      c.at(i, j) = acc;
    }
  return c;
}

// a^T @ b
inline Mat matmul_tn(const Mat& a, const Mat& b) {
  Mat c(a.cols, b.cols);
  for (int64_t i = 0; i < a.cols; ++i)
    for (int64_t j = 0; j < b.cols; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < a.rows; ++k) acc += a.at(k, i) * b.at(k, j);
      c.at(i, j) = acc;
    }
  return c;
}

// a @ b
inline Mat matmul_nn(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.cols; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < a.cols; ++k) acc += a.at(i, k) * b.at(k, j);
      c.at(i, j) = acc;
    }
  return c;
}

// Columns [start, start + n) of m, or rows with by_rows. `blocks` equal blocks along that dim, each split
// into `tp` chunks: rank r's slice is chunk r of every block, in block order (ShardingSpec's layout).
inline Mat shard(const Mat& m, bool by_rows, int blocks, int rank, int tp) {
  const int64_t extent = by_rows ? m.rows : m.cols;
  const int64_t block = extent / blocks, chunk = block / tp;
  Mat out(by_rows ? chunk * blocks : m.rows, by_rows ? m.cols : chunk * blocks);
  for (int b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < chunk; ++c) {
      const int64_t src = b * block + rank * chunk + c, dst = b * chunk + c;
      if (by_rows)
        for (int64_t j = 0; j < m.cols; ++j) out.at(dst, j) = m.at(src, j);
      else
        for (int64_t i = 0; i < m.rows; ++i) out.at(i, dst) = m.at(i, src);
    }
  return out;
}

// Largest |got - want| / (max |want| + tiny) over all elements.
inline double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 1e-30, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / scale);
  return worst;
}

inline void expect_close(const Tensor& got, const Mat& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.rows * want.cols) << what << ": " << got.describe();
  const double err = rel_error(got.to_doubles(), want.v);
  EXPECT_LE(err, tol) << what;
}

}  // namespace retort::tp_testing
