#pragma once
// Symmetric eigendecomposition for the second-order optimizers (REKLS, TP-REKLS).
//   CPU: Eigen's SelfAdjointEigenSolver (tridiagonalisation + implicit QR), float32.
//   GPU: cuSOLVER syevd (divide and conquer), float32; eigh_batched uses the batched Jacobi solver
//        (syevjBatched) for many matrices of one size up to 32.
// Contract, both backends:
//   - input a: f32 [n, n] (or [b, n, n] for eigh_batched), row-major; only the LOWER triangle (a[i][j], j <= i)
//     is read, so a slightly asymmetric accumulation does not matter;
//   - eigenvalues f32 [n] in DESCENDING order, eigenvectors f32 [n, n] with column j the unit eigenvector of
//     eigenvalue j (a = Q diag(lam) Q^T);
//   - when the float32 solver reports failure or returns a non-finite value, the matrix is solved again in
//     float64 and rounded back; no jitter is ever added; a float64 failure (a non-finite input) throws;
//   - deterministic: the same input on the same device gives the same bits (no atomics, no randomness).
#include <cstdint>

#include "core/tensor/tensor.h"

namespace retort::optim {

struct EighResult {
  Tensor eigenvalues;   // f32 [n] (or [b, n]), descending
  Tensor eigenvectors;  // f32 [n, n] (or [b, n, n]), columns are eigenvectors
};

// Outputs preallocated by the caller on a's device (f32 [n] and [n, n]).
void eigh(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors);
EighResult eigh(const Tensor& a);

// A batch of matrices of one size: a [b, n, n] -> eigenvalues [b, n], eigenvectors [b, n, n].
void eigh_batched(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors);
EighResult eigh_batched(const Tensor& a);

// How many float64 retries eigh has made in this process (a diagnostic: tests and logs read it).
int64_t eigh_float64_retries();

}  // namespace retort::optim
