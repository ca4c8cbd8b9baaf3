#pragma once
// The two elementwise pieces of a REKLS step that are not plain GEMMs or blends (optim/rekls_math.cpp builds the
// rest from core/kernels). Each has a CPU loop and a CUDA kernel (rekls_kernels_cuda.cu) behind one entry point;
// all tensors are f32 on one device.
#include "core/tensor/tensor.h"

namespace retort::optim {

// out[i][j] = q[i][j] / (dim * max(lam[j], eps)): the eigenvector columns scaled so that out q^T is the
// KL-Shampoo preconditioner Q diag(1 / (dim * max(lam, eps))) Q^T. q, out [k, k]; lam [k].
void scale_eigenvector_columns(const Tensor& q, const Tensor& lam, double dim, double eps, Tensor& out);

// Adam in the eigenbasis (optimizer.md step 6), in one pass:
//   m = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2 ;  u = (m / bc1) / (sqrt(v / bc2) + eps)
// g, m, v, u [m, n]; u may alias g.
struct RotatedAdamStep {
  float beta1, beta2, eps, bias_correction1, bias_correction2;
};
void rotated_adam_update(const Tensor& g, Tensor& m, Tensor& v, Tensor& u, const RotatedAdamStep& s);

}  // namespace retort::optim
