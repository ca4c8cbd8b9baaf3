#include "optim/rekls/rekls_math.h"

#include <cmath>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"
#include "optim/rekls/rekls_kernels.h"

namespace retort::optim {

namespace {

Tensor identity(int64_t k, Device device) {
  std::vector<float> values(static_cast<size_t>(k * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) values[i * k + i] = 1.0f;
  return Tensor::from_floats(values, {k, k}, DType::F32, device);
}

// c = op(a) op(b) into a new [rows, cols] tensor.
Tensor product(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const int64_t rows = trans_a ? a.size(1) : a.size(0);
  const int64_t cols = trans_b ? b.size(0) : b.size(1);
  Tensor c = Tensor::empty({rows, cols}, DType::F32, a.device());
  kernels::gemm(a, b, c, trans_a, trans_b, 1.0f, 0.0f);
  return c;
}

// The KL-Shampoo preconditioner Q diag(1 / (dim * max(lam, eps))) Q^T.
Tensor kl_preconditioner(const Tensor& basis, const Tensor& eigenvalues, double dim, double eps) {
  Tensor scaled = Tensor::empty(basis.shape(), DType::F32, basis.device());
  scale_eigenvector_columns(basis, eigenvalues, dim, eps, scaled);
  return product(scaled, basis, false, true);
}

}  // namespace

ReklsParamState make_rekls_state(int64_t m, int64_t n, int64_t left_rows, int64_t left_row_start, int64_t right_rows,
                                 int64_t right_row_start, Device device) {
  ReklsParamState s;
  s.exp_avg = Tensor::zeros({m, n}, DType::F32, device);
  s.exp_avg_sq = Tensor::zeros({m, n}, DType::F32, device);
  s.left_factor = Tensor::zeros({left_rows, m}, DType::F32, device);
  s.right_factor = Tensor::zeros({right_rows, n}, DType::F32, device);
  s.left_basis = identity(m, device).rows(left_row_start, left_rows).clone();
  s.right_basis = identity(n, device).rows(right_row_start, right_rows).clone();
  s.left_eigenvalues = Tensor::zeros({m}, DType::F32, device);
  s.right_eigenvalues = Tensor::zeros({n}, DType::F32, device);
  s.left_row_start = left_row_start;
  s.right_row_start = right_row_start;
  return s;
}

double shampoo_blend(double shampoo_beta, int64_t t) {
  return 1.0 - (1.0 - shampoo_beta) / (1.0 - std::pow(shampoo_beta, static_cast<double>(t)));
}

void update_factor_chunks(const Tensor& grad, const ReklsBases& old, ReklsParamState& s, double bhat, double eps) {
  const int64_t m = grad.size(0), n = grad.size(1);
  // Both preconditioners come from the factors before either changes (the last step's eigenbasis).
  const Tensor left_pre = kl_preconditioner(old.left, s.left_eigenvalues, static_cast<double>(m), eps);
  const Tensor right_pre = kl_preconditioner(old.right, s.right_eigenvalues, static_cast<double>(n), eps);
  const int64_t left_rows = s.left_factor.size(0), right_rows = s.right_factor.size(0);
  // UL[chunk] = (G[chunk rows] CR) G^T: only this chunk's rows are formed.
  const Tensor grad_rows = left_rows == m ? grad : grad.rows(s.left_row_start, left_rows);
  const Tensor left_update = product(product(grad_rows, right_pre, false, false), grad, false, true);
  // UR[chunk] = (G[:, chunk cols])^T (CL G).
  const Tensor grad_cols = right_rows == n ? grad : narrow_copy(grad, 1, s.right_row_start, right_rows);
  const Tensor right_update = product(grad_cols, product(left_pre, grad, false, false), true, false);
  const float keep = static_cast<float>(bhat), take = static_cast<float>(1.0 - bhat);
  kernels::add(s.left_factor, left_update, s.left_factor, keep, take);
  kernels::add(s.right_factor, right_update, s.right_factor, keep, take);
}

void rotate_into_new_basis(ReklsParamState& s, const ReklsBases& old, const ReklsBases& fresh,
                           const Tensor& left_eigenvalues, const Tensor& right_eigenvalues) {
  // Morig = QL_old M QR_old^T, then M = QL^T Morig QR.
  const Tensor original = product(product(old.left, s.exp_avg, false, false), old.right, false, true);
  s.exp_avg = product(product(fresh.left, original, true, false), fresh.right, false, false);
  const int64_t left_rows = s.left_basis.size(0), right_rows = s.right_basis.size(0);
  s.left_basis = left_rows == fresh.left.size(0) ? fresh.left : fresh.left.rows(s.left_row_start, left_rows).clone();
  s.right_basis =
      right_rows == fresh.right.size(0) ? fresh.right : fresh.right.rows(s.right_row_start, right_rows).clone();
  s.left_eigenvalues = left_eigenvalues;
  s.right_eigenvalues = right_eigenvalues;
}

Tensor rotated_adam_direction(const Tensor& grad, const ReklsBases& bases, ReklsParamState& s, const ReklsOptions& o,
                              int64_t t) {
  Tensor rotated = product(product(bases.left, grad, true, false), bases.right, false, false);
  RotatedAdamStep step{};
  step.beta1 = static_cast<float>(o.beta1);
  step.beta2 = static_cast<float>(o.beta2);
  step.eps = static_cast<float>(o.eps);
  step.bias_correction1 = static_cast<float>(1.0 - std::pow(o.beta1, static_cast<double>(t)));
  step.bias_correction2 = static_cast<float>(1.0 - std::pow(o.beta2, static_cast<double>(t)));
  rotated_adam_update(rotated, s.exp_avg, s.exp_avg_sq, rotated, step);
  return rotated;
}

void apply_rekls_update(Tensor& weight, const Tensor& direction, const Tensor& left_rows, const Tensor& right_rows,
                        double lr, double weight_decay) {
  const Tensor update = product(product(left_rows, direction, false, false), right_rows, false, true);
  RETORT_CHECK(update.shape() == weight.shape(), "REKLS: update {} does not match the weight {}", update.describe(),
               weight.describe());
  if (weight_decay != 0.0) kernels::scale(weight, static_cast<float>(1.0 - lr * weight_decay), weight);
  kernels::add(weight, update, weight, 1.0f, static_cast<float>(-lr));
}

}  // namespace retort::optim
