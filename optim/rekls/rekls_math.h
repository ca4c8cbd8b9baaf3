#pragma once
// The per-parameter pieces of a REKLS step (shared/reference/optimizer.md steps 1-7), written once on f32
// tensors of any device through core/kernels (GEMMs in full float32: cuBLAS without TF32 on the GPU) and
// optim/rekls_kernels.h. REKLS (rekls.h) runs them on whole matrices; TP-REKLS (tp_rekls.h) runs the factor
// update on its row chunks of L and R and the preconditioning on the gathered gradient.
#include <cstdint>

#include "core/tensor/tensor.h"

namespace retort::optim {

struct ReklsOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double shampoo_beta = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One [m, n] parameter's state, f32 on the parameter's device. The factors and the eigenbases hold rows
// [left_row_start, left_row_start + rows) of L, QL [m, m] and of R, QR [n, n]: all rows in REKLS, a row chunk in
// TP-REKLS. The eigenbasis and eigenvalues are those of the last step's factors.
struct ReklsParamState {
  Tensor exp_avg, exp_avg_sq;                  // [m, n], in the eigenbasis; exp_avg_sq is never rotated
  Tensor left_factor, right_factor;            // [rows_l, m], [rows_r, n]
  Tensor left_basis, right_basis;              // [rows_l, m], [rows_r, n]; column j of QL / QR is eigenvector j
  Tensor left_eigenvalues, right_eigenvalues;  // [m], [n], descending (whole)
  int64_t left_row_start = 0, right_row_start = 0;
};

// The whole eigenbases of the last step (REKLS: the state's own; TP-REKLS: gathered from the row chunks).
struct ReklsBases {
  Tensor left, right;  // QL [m, m], QR [n, n]
};

// Fresh state (M = V = L = R = 0, Q = I, lam = 0) for an [m, n] parameter, with factor and basis row chunks of
// the given lengths starting at the given rows.
ReklsParamState make_rekls_state(int64_t m, int64_t n, int64_t left_rows, int64_t left_row_start, int64_t right_rows,
                                 int64_t right_row_start, Device device);

// Step 1: the factor blend weight bhat = 1 - (1 - bs) / (1 - bs^t) (0 at t = 1).
double shampoo_blend(double shampoo_beta, int64_t t);

// Step 2 on this state's row chunks: L = bhat L + (1 - bhat) (G CR G^T)[chunk], R likewise with G^T CL G,
// both preconditioners from the last step's eigenbasis `old` and the state's eigenvalues. grad is the whole
// [m, n] gradient.
void update_factor_chunks(const Tensor& grad, const ReklsBases& old, ReklsParamState& state, double bhat, double eps);

// Step 3's moment rotation once the new eigenbases are known: M = QL^T (QL_old M QR_old^T) QR; then the new
// eigenvalues and this state's rows of the new bases replace the old ones.
void rotate_into_new_basis(ReklsParamState& state, const ReklsBases& old, const ReklsBases& fresh,
                           const Tensor& left_eigenvalues, const Tensor& right_eigenvalues);

// Steps 5-6: G' = QL^T G QR, the Adam moments in the eigenbasis, and U' (returned, [m, n]). t is the step.
Tensor rotated_adam_direction(const Tensor& grad, const ReklsBases& bases, ReklsParamState& state,
                              const ReklsOptions& options, int64_t t);

// Steps 4 and 7 on (a shard of) the weight: W = W - lr wd W, then W = W - lr QL_rows U' QR_rows^T, where
// left_rows / right_rows are the rows of QL / QR matching the weight's rows / columns (the whole bases for a
// whole weight).
void apply_rekls_update(Tensor& weight, const Tensor& direction, const Tensor& left_rows, const Tensor& right_rows,
                        double lr, double weight_decay);

}  // namespace retort::optim
