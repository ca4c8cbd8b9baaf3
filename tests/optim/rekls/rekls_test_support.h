#pragma once
// Shared by the REKLS tests: random matrices, and REKLS written out in float64 straight from
// shared/reference/optimizer.md (Eigen in double, its own eigensolver call), the reference the f32 optimizer
// is held to.
#include <Eigen/Dense>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::optim::testing {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

inline std::vector<float> normal_values(int64_t count, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

inline MatrixD to_matrix(const std::vector<float>& values, int64_t rows, int64_t cols) {
  MatrixD m(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = values[static_cast<size_t>(i * cols + j)];
  return m;
}

inline MatrixD to_matrix(const Tensor& t) {
  const auto values = t.to_doubles();
  MatrixD m(t.size(0), t.size(1));
  for (int64_t i = 0; i < m.rows(); ++i)
    for (int64_t j = 0; j < m.cols(); ++j) m(i, j) = values[static_cast<size_t>(i * m.cols() + j)];
  return m;
}

struct ReferenceOptions {
  double beta1 = 0.9, beta2 = 0.95, shampoo_beta = 0.95, eps = 1e-8, weight_decay = 0.01;
};

// REKLS for one [m, n] weight in float64.
class ReferenceRekls {
 public:
  ReferenceRekls(int64_t m, int64_t n, ReferenceOptions o) : o_(o) {
    M_ = MatrixD::Zero(m, n);
    V_ = MatrixD::Zero(m, n);
    L_ = MatrixD::Zero(m, m);
    R_ = MatrixD::Zero(n, n);
    QL_ = MatrixD::Identity(m, m);
    QR_ = MatrixD::Identity(n, n);
    lamL_ = Eigen::VectorXd::Zero(m);
    lamR_ = Eigen::VectorXd::Zero(n);
  }

  void step(MatrixD& W, const MatrixD& G, double lr) {
    ++t_;
    const double m = static_cast<double>(W.rows()), n = static_cast<double>(W.cols());
    const double bs = o_.shampoo_beta;
    const double bhat = 1.0 - (1.0 - bs) / (1.0 - std::pow(bs, t_));
    const MatrixD CL = QL_ * inverse_diagonal(lamL_, m) * QL_.transpose();
    const MatrixD CR = QR_ * inverse_diagonal(lamR_, n) * QR_.transpose();
    const MatrixD UL = G * CR * G.transpose(), UR = G.transpose() * CL * G;
    L_ = bhat * L_ + (1.0 - bhat) * UL;
    R_ = bhat * R_ + (1.0 - bhat) * UR;
    const MatrixD original = QL_ * M_ * QR_.transpose();
    descending_eigh(L_, lamL_, QL_);
    descending_eigh(R_, lamR_, QR_);
    M_ = QL_.transpose() * original * QR_;
    W -= lr * o_.weight_decay * W;
    const MatrixD rotated = QL_.transpose() * G * QR_;
    M_ = o_.beta1 * M_ + (1.0 - o_.beta1) * rotated;
    V_ = o_.beta2 * V_ + (1.0 - o_.beta2) * rotated.cwiseProduct(rotated);
    const double bc1 = 1.0 - std::pow(o_.beta1, t_), bc2 = 1.0 - std::pow(o_.beta2, t_);
    const MatrixD direction = (M_ / bc1).array() / ((V_ / bc2).array().sqrt() + o_.eps);
    W -= lr * (QL_ * direction * QR_.transpose());
  }

  const MatrixD& left_factor() const { return L_; }
  const MatrixD& right_factor() const { return R_; }
  const Eigen::VectorXd& left_eigenvalues() const { return lamL_; }
  const Eigen::VectorXd& right_eigenvalues() const { return lamR_; }

 private:
  MatrixD inverse_diagonal(const Eigen::VectorXd& lam, double dim) const {
    Eigen::VectorXd d(lam.size());
    for (Eigen::Index i = 0; i < lam.size(); ++i) d(i) = 1.0 / (dim * std::max(lam(i), o_.eps));
    return d.asDiagonal();
  }
  static void descending_eigh(const MatrixD& a, Eigen::VectorXd& lam, MatrixD& q) {
    const Eigen::MatrixXd dense = a;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(dense);
    const Eigen::Index k = a.rows();
    lam.resize(k);
    q.resize(k, k);
    for (Eigen::Index j = 0; j < k; ++j) {
      lam(j) = solver.eigenvalues()(k - 1 - j);
      q.col(j) = solver.eigenvectors().col(k - 1 - j);
    }
  }

  ReferenceOptions o_;
  int t_ = 0;
  MatrixD M_, V_, L_, R_, QL_, QR_;
  Eigen::VectorXd lamL_, lamR_;
};

}  // namespace retort::optim::testing
