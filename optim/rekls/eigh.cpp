#include "optim/rekls/eigh.h"

#include <Eigen/Dense>
#include <atomic>
#include <cmath>
#include <exception>

#include "core/util/error.h"

namespace retort::optim {

namespace {

std::atomic<int64_t> g_retries{0};

using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Writes the solver's ascending result as descending eigenvalues and matching eigenvector columns.
template <typename Solver>
void write_descending(const Solver& solver, int64_t n, float* lam, float* q) {
  const auto& values = solver.eigenvalues();
  const auto& vectors = solver.eigenvectors();
  for (int64_t j = 0; j < n; ++j) {
    lam[j] = static_cast<float>(values(n - 1 - j));
    for (int64_t i = 0; i < n; ++i) q[i * n + j] = static_cast<float>(vectors(i, n - 1 - j));
  }
}

bool all_finite(const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// One n x n matrix on the CPU. Eigen's solver reads only the lower triangle of its column-major copy, which is
// the lower triangle of the row-major input.
void eigh_cpu_one(const float* a, int64_t n, float* lam, float* q) {
  Eigen::Map<const RowMatrixF> input(a, n, n);
  {
    Eigen::MatrixXf work = input;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf> solver(work, Eigen::ComputeEigenvectors);
    if (solver.info() == Eigen::Success) {
      write_descending(solver, n, lam, q);
      if (all_finite(lam, n) && all_finite(q, n * n)) return;
    }
  }
  ++g_retries;
  Eigen::MatrixXd work = input.cast<double>();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(work, Eigen::ComputeEigenvectors);
  RETORT_CHECK(solver.info() == Eigen::Success,
               "eigh: the float64 retry failed on a {}x{} matrix too (is the input "
               "finite? a NaN or infinite gradient reached the optimizer)",
               n, n);
  write_descending(solver, n, lam, q);
  RETORT_CHECK(all_finite(lam, n) && all_finite(q, n * n),
               "eigh: non-finite eigenvectors for a {}x{} matrix even in float64 (non-finite input?)", n, n);
}

void check_args(const Tensor& a, const Tensor& eigenvalues, const Tensor& eigenvectors, bool batched) {
  const int want_dims = batched ? 3 : 2;
  RETORT_CHECK(a.ndim() == want_dims && a.size(-1) == a.size(-2) && a.dtype() == DType::F32,
               "eigh{} needs a f32 {} of square matrices, got {}", batched ? "_batched" : "",
               batched ? "[b, n, n] batch" : "[n, n] matrix", a.describe());
  Shape values_shape(a.shape().begin(), a.shape().end() - 1);
  RETORT_CHECK(eigenvalues.shape() == values_shape && eigenvectors.shape() == a.shape() &&
                   eigenvalues.dtype() == DType::F32 && eigenvectors.dtype() == DType::F32 &&
                   eigenvalues.device() == a.device() && eigenvectors.device() == a.device(),
               "eigh: outputs {} and {} do not fit input {}", eigenvalues.describe(), eigenvectors.describe(),
               a.describe());
}

}  // namespace

#ifdef RETORT_WITH_CUDA
void eigh_cuda(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors, std::atomic<int64_t>& retries);
void eigh_batched_cuda(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors, std::atomic<int64_t>& retries);
#endif

void eigh(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors) {
  check_args(a, eigenvalues, eigenvectors, false);
  const int64_t n = a.size(0);
  if (n == 0) return;
  if (a.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    eigh_cuda(a, eigenvalues, eigenvectors, g_retries);
    return;
#else
    throw Error("eigh on a GPU tensor in a build without CUDA");
#endif
  }
  eigh_cpu_one(a.data<float>(), n, eigenvalues.data<float>(), eigenvectors.data<float>());
}

EighResult eigh(const Tensor& a) {
  RETORT_CHECK(a.ndim() == 2, "eigh needs an [n, n] matrix, got {}", a.describe());
  EighResult r{Tensor::empty({a.size(0)}, DType::F32, a.device()), Tensor::empty(a.shape(), DType::F32, a.device())};
  eigh(a, r.eigenvalues, r.eigenvectors);
  return r;
}

void eigh_batched(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors) {
  check_args(a, eigenvalues, eigenvectors, true);
  const int64_t b = a.size(0), n = a.size(1);
  if (b == 0 || n == 0) return;
  if (a.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    eigh_batched_cuda(a, eigenvalues, eigenvectors, g_retries);
    return;
#else
    throw Error("eigh_batched on a GPU tensor in a build without CUDA");
#endif
  }
  const float* in = a.data<float>();
  float* lam = eigenvalues.data<float>();
  float* q = eigenvectors.data<float>();
  // Each matrix is independent and the solver is sequential, so the batch result does not depend on threads.
  // An exception must not leave an OpenMP region: the first failure is kept and rethrown after it.
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic) if (b > 1 && n >= 16)
  for (int64_t i = 0; i < b; ++i) {
    try {
      eigh_cpu_one(in + i * n * n, n, lam + i * n, q + i * n * n);
    } catch (...) {
#pragma omp critical(retort_eigh_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

EighResult eigh_batched(const Tensor& a) {
  RETORT_CHECK(a.ndim() == 3, "eigh_batched needs a [b, n, n] batch, got {}", a.describe());
  EighResult r{Tensor::empty({a.size(0), a.size(1)}, DType::F32, a.device()),
               Tensor::empty(a.shape(), DType::F32, a.device())};
  eigh_batched(a, r.eigenvalues, r.eigenvectors);
  return r;
}

int64_t eigh_float64_retries() {
  return g_retries.load();
}

}  // namespace retort::optim
