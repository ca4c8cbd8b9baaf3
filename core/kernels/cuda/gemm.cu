// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major [m, n]
// matrix is the column-major [n, m] matrix of the same bytes, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with the operands swapped. Compute is CUBLAS_COMPUTE_32F with the handle's default
// math mode, i.e. true float32 for f32 (no TF32) and float32 accumulation for bf16.
#include <climits>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace detail {
namespace {

cudaDataType cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      fail("gemm (CUDA): dtype {} is not supported on the GPU", dtype_name(dtype));
  }
}

int to_int(int64_t v, const char* what) {
  check(v >= 0 && v <= INT_MAX, "gemm (CUDA): {} = {} does not fit cuBLAS's 32-bit sizes", what, v);
  return static_cast<int>(v);
}

// cuBLAS grids put the batch on a 16-bit grid dimension in some kernels; larger batches go in slices.
constexpr int64_t kMaxBatchPerCall = 65535;

}  // namespace

void gemm_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                  int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta, void* c, int64_t ldc,
                  int64_t stride_c, int64_t batch, DType ab_dtype, DType c_dtype) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(c_dtype == ab_dtype || (ab_dtype == DType::BF16 && c_dtype == DType::F32),
        "gemm (CUDA): {} operands with a {} result are not supported", dtype_name(ab_dtype), dtype_name(c_dtype));
  const cudaDataType ab_type = cuda_type(ab_dtype), c_type = cuda_type(c_dtype);
  const size_t ab_size = dtype_size(ab_dtype), c_size = dtype_size(c_dtype);
  cublasHandle_t handle = rc::cublas_handle();
  for (int64_t first = 0; first < batch; first += kMaxBatchPerCall) {
    const int64_t count = std::min(kMaxBatchPerCall, batch - first);
    const auto* a_i = static_cast<const char*>(a) + first * stride_a * ab_size;
    const auto* b_i = static_cast<const char*>(b) + first * stride_b * ab_size;
    auto* c_i = static_cast<char*>(c) + first * stride_c * c_size;
    RETORT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(n, "n"),
        to_int(m, "m"), to_int(k, "k"), &alpha, b_i, ab_type, to_int(ldb, "ldb"), stride_b, a_i, ab_type,
        to_int(lda, "lda"), stride_a, &beta, c_i, c_type, to_int(ldc, "ldc"), stride_c, static_cast<int>(count),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace detail

using namespace detail;

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha, float beta) {
  rc::DeviceGuard guard(device_of(c, "gemm"));
  const int64_t m = c.size(-2), n = c.size(-1);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  if (m == 0 || n == 0) return;
  int64_t batch = c.numel() / (m * n);
  if (k == 0) {
    // cuBLAS may not touch C for an empty inner dimension; the contract says C = beta * C.
    if (beta == 0.f) {
      fill(c, 0.0);
    } else {
      scale(c, beta, c);
    }
    return;
  }
  const bool a_shared = a.ndim() == 2, b_shared = b.ndim() == 2;
  int64_t rows = m;
  int64_t stride_a = a_shared ? 0 : m * k, stride_b = b_shared ? 0 : k * n, stride_c = m * n;
  if (b_shared && !a_shared && !trans_a) {
    // A batch of row-major [m, k] blocks against one matrix is a single [batch * m, k] product.
    rows = batch * m;
    batch = 1;
    stride_a = 0;
    stride_c = 0;
  }
  const int64_t lda = trans_a ? m : k;  // a is [rows, k], or [k, m] when transposed
  const int64_t ldb = trans_b ? k : n;
  gemm_strided(trans_a, trans_b, rows, n, k, alpha, a.raw_data(), lda, stride_a, b.raw_data(), ldb, stride_b, beta,
               c.raw_data(), n, stride_c, batch, a.dtype(), c.dtype());
}

}  // namespace retort::kernels::cuda
