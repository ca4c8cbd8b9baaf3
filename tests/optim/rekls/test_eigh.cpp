// eigh on the CPU: the decomposition reconstructs the input, the eigenvectors are orthonormal, the eigenvalues
// descend, only the lower triangle is read, and the batched form equals one-by-one calls; on random SPD and
// rank-deficient matrices, against float64 checks written here.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "optim/rekls/eigh.h"
#include "tests/optim/rekls/rekls_test_support.h"

namespace retort::optim {
namespace {
using testing::MatrixD;

// A [k, k] symmetric PSD matrix B B^T / cols with B [k, cols]: rank min(k, cols).
std::vector<float> gram(int64_t k, int64_t cols, uint32_t seed) {
  const MatrixD b = testing::to_matrix(testing::normal_values(k * cols, seed), k, cols);
  const MatrixD a = b * b.transpose() / static_cast<double>(cols);
  std::vector<float> out(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) out[static_cast<size_t>(i * k + j)] = static_cast<float>(a(i, j));
  return out;
}

// Checks a = Q diag(lam) Q^T, Q^T Q = I and lam descending, with errors relative to the largest eigenvalue.
void expect_valid_decomposition(const std::vector<float>& a, int64_t k, const Tensor& lam, const Tensor& q) {
  const MatrixD A = testing::to_matrix(a, k, k), Q = testing::to_matrix(q);
  const auto values = lam.to_doubles();
  Eigen::VectorXd l(k);
  for (int64_t i = 0; i < k; ++i) l(i) = values[static_cast<size_t>(i)];
  const double scale = std::max(std::abs(l(0)), 1e-30);
  for (int64_t i = 1; i < k; ++i) EXPECT_GE(l(i - 1), l(i)) << "eigenvalues not descending at " << i;
  const double reconstruction = (Q * l.asDiagonal() * Q.transpose() - A).cwiseAbs().maxCoeff() / scale;
  const double orthonormality = (Q.transpose() * Q - MatrixD::Identity(k, k)).cwiseAbs().maxCoeff();
  EXPECT_LT(reconstruction, 2e-5 * std::sqrt(double(k))) << "k " << k;
  EXPECT_LT(orthonormality, 2e-5 * std::sqrt(double(k))) << "k " << k;
  // Against float64 eigenvalues of the same (rounded) input.
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> exact((Eigen::MatrixXd(A)));
  for (int64_t i = 0; i < k; ++i)
    EXPECT_NEAR(l(i), exact.eigenvalues()(k - 1 - i), 2e-5 * scale * std::sqrt(double(k)));
}

TEST(Eigh, SpdAndRankDeficientMatrices) {
  for (auto [k, cols] : {std::pair<int64_t, int64_t>{1, 1}, {5, 20}, {16, 64}, {40, 8}, {96, 30}, {200, 300}}) {
    const auto a = gram(k, cols, static_cast<uint32_t>(k * 7 + cols));
    EighResult r = eigh(Tensor::from_floats(a, {k, k}));
    ASSERT_EQ(r.eigenvalues.shape(), (Shape{k}));
    ASSERT_EQ(r.eigenvectors.shape(), (Shape{k, k}));
    expect_valid_decomposition(a, k, r.eigenvalues, r.eigenvectors);
  }
}

TEST(Eigh, ZeroMatrixGivesZeroEigenvaluesAndAnOrthonormalBasis) {
  const int64_t k = 12;
  std::vector<float> a(k * k, 0.0f);
  EighResult r = eigh(Tensor::from_floats(a, {k, k}));
  for (double v : r.eigenvalues.to_doubles()) EXPECT_EQ(v, 0.0);
  const MatrixD Q = testing::to_matrix(r.eigenvectors);
  EXPECT_LT((Q.transpose() * Q - MatrixD::Identity(k, k)).cwiseAbs().maxCoeff(), 1e-6);
}

TEST(Eigh, ReadsOnlyTheLowerTriangle) {
  const int64_t k = 24;
  auto a = gram(k, 48, 3);
  auto garbage = a;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j) garbage[static_cast<size_t>(i * k + j)] = 1e6f * static_cast<float>(j - i);
  EighResult clean = eigh(Tensor::from_floats(a, {k, k}));
  EighResult upper_garbage = eigh(Tensor::from_floats(garbage, {k, k}));
  EXPECT_EQ(clean.eigenvalues.to_floats(), upper_garbage.eigenvalues.to_floats());
  EXPECT_EQ(clean.eigenvectors.to_floats(), upper_garbage.eigenvectors.to_floats());
}

TEST(Eigh, BatchedEqualsOneByOneBitForBit) {
  const int64_t b = 5, k = 20;
  std::vector<float> all;
  for (int64_t i = 0; i < b; ++i) {
    auto a = gram(k, 10 + 7 * i, static_cast<uint32_t>(50 + i));
    all.insert(all.end(), a.begin(), a.end());
  }
  EighResult batch = eigh_batched(Tensor::from_floats(all, {b, k, k}));
  const auto values = batch.eigenvalues.to_floats(), vectors = batch.eigenvectors.to_floats();
  for (int64_t i = 0; i < b; ++i) {
    std::vector<float> a(all.begin() + i * k * k, all.begin() + (i + 1) * k * k);
    EighResult one = eigh(Tensor::from_floats(a, {k, k}));
    EXPECT_EQ(one.eigenvalues.to_floats(), std::vector<float>(values.begin() + i * k, values.begin() + (i + 1) * k));
    EXPECT_EQ(one.eigenvectors.to_floats(),
              std::vector<float>(vectors.begin() + i * k * k, vectors.begin() + (i + 1) * k * k));
  }
}

TEST(Eigh, NonFiniteInputThrowsAfterTheFloat64Retry) {
  const int64_t k = 6;
  auto a = gram(k, 12, 9);
  a[2 * k + 1] = std::numeric_limits<float>::quiet_NaN();  // lower triangle
  const int64_t retries_before = eigh_float64_retries();
  try {
    eigh(Tensor::from_floats(a, {k, k}));
    FAIL() << "a NaN input must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(eigh_float64_retries(), retries_before + 1);
}

TEST(Eigh, RejectsNonSquareInput) {
  EXPECT_THROW(eigh(Tensor::zeros({3, 4})), Error);
  EXPECT_THROW(eigh_batched(Tensor::zeros({2, 3, 4})), Error);
}

}  // namespace
}  // namespace retort::optim
