// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Matrix products through cuBLAS. Tensors are row-major and cuBLAS is column-major: a row-major [m, n]
// matrix is the column-major [n, m] matrix of the same bytes, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with the operands swapped. Compute is CUBLAS_COMPUTE_32F with the handle's default
// math mode, i.e. true float32 for f32 (no TF32) and float32 accumulation for bf16.
// Linear layers go through cuBLASLt instead, whose epilogues fold the bias (and GELU, and in the backward the
// bias gradient) into the product's store, saving a pass over the output each.
#include <climits>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/kernels/backends.h"
#include "core/kernels/cuda/epilogue_notice.h"
#include "core/kernels/decode_kernels.h"

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

// cuBLAS picks slow kernels for a large 16-bit product with a dimension that is not a multiple of 8: GPT-2's
// 50,257-id head took 13-15 ms on an H100 at batch 16 x 1024 against about 2 ms at 50,304, in the forward and again
// in each of its two backward products (rows padded to 16 bytes alone did not help: the size itself decides).
// Such a product runs on copies padded with zeros to multiples of 8 in every dimension (zero rows and columns add
// nothing to the product; the extra outputs are dropped): strided copies at memory speed, about 1 ms for those
// logits, in place of the slow kernels. Small products are not worth the copies.
constexpr double kPaddingMinMacs = double(1 << 28);

int64_t round_up8(int64_t v) {
  return (v + 7) / 8 * 8;
}

// A row-major matrix of `rows` x `cols` elements, `ld` elements apart.
struct MatrixRef {
  char* data;
  int64_t rows, cols, ld;
};

// A [padded_rows, padded_cols] buffer holding `m` in its top-left corner (copy_in) and zeros elsewhere (zero_rest).
Tensor padded_copy(const MatrixRef& m, int64_t padded_rows, int64_t padded_cols, DType dtype, Device device,
                   bool copy_in, bool zero_rest, MatrixRef& padded) {
  const size_t es = dtype_size(dtype);
  Tensor buffer = Tensor::empty({padded_rows, padded_cols}, dtype, device);
  padded = {static_cast<char*>(buffer.raw_data()), padded_rows, padded_cols, padded_cols};
  cudaStream_t stream = rc::current_stream();
  if (zero_rest) {
    if (padded_cols > m.cols)
      RETORT_CUDA_CHECK(cudaMemset2DAsync(padded.data + m.cols * es, padded_cols * es, 0, (padded_cols - m.cols) * es,
                                          m.rows, stream));
    if (padded_rows > m.rows)
      RETORT_CUDA_CHECK(cudaMemsetAsync(padded.data + m.rows * padded_cols * es, 0,
                                        (padded_rows - m.rows) * padded_cols * es, stream));
  }
  if (copy_in)
    RETORT_CUDA_CHECK(cudaMemcpy2DAsync(padded.data, padded_cols * es, m.data, m.ld * es, m.cols * es, m.rows,
                                        cudaMemcpyDeviceToDevice, stream));
  return buffer;
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
  int64_t lda = trans_a ? m : k;  // a is [rows, k], or [k, m] when transposed
  int64_t ldb = trans_b ? k : n;
  int64_t ldc = n;
  const void* a_data = a.raw_data();
  const void* b_data = b.raw_data();
  void* c_data = c.raw_data();
  // One large 16-bit product with a dimension that is not a multiple of 8: run it padded (see kPaddingMinMacs).
  Tensor a_padded, b_padded, c_padded;
  const MatrixRef c_ref{static_cast<char*>(c.raw_data()), rows, n, n};
  const size_t ab_size = dtype_size(a.dtype()), c_size = dtype_size(c.dtype());
  int64_t run_rows = rows, run_n = n, run_k = k;
  if (batch == 1 && ab_size == 2 && double(rows) * double(n) * double(k) >= kPaddingMinMacs &&
      (rows % 8 != 0 || n % 8 != 0 || k % 8 != 0)) {
    run_rows = round_up8(rows), run_n = round_up8(n), run_k = round_up8(k);
    auto* a_bytes = static_cast<char*>(const_cast<void*>(a_data));
    auto* b_bytes = static_cast<char*>(const_cast<void*>(b_data));
    MatrixRef padded{};
    // a is [rows, k] ([k, rows] transposed), b is [k, n] ([n, k] transposed).
    if (run_k != k || run_rows != rows) {
      const MatrixRef a_ref = trans_a ? MatrixRef{a_bytes, k, rows, lda} : MatrixRef{a_bytes, rows, k, lda};
      a_padded = padded_copy(a_ref, trans_a ? run_k : run_rows, trans_a ? run_rows : run_k, a.dtype(), c.device(), true,
                             true, padded);
      a_data = padded.data;
      lda = padded.ld;
    }
    if (run_k != k || run_n != n) {
      const MatrixRef b_ref = trans_b ? MatrixRef{b_bytes, n, k, ldb} : MatrixRef{b_bytes, k, n, ldb};
      b_padded = padded_copy(b_ref, trans_b ? run_n : run_k, trans_b ? run_k : run_n, b.dtype(), c.device(), true, true,
                             padded);
      b_data = padded.data;
      ldb = padded.ld;
    }
    if (run_rows != rows || run_n != n) {
      c_padded = padded_copy(c_ref, run_rows, run_n, c.dtype(), c.device(), beta != 0.f, false, padded);
      c_data = padded.data;
      ldc = padded.ld;
    }
  }
  gemm_strided(trans_a, trans_b, run_rows, run_n, run_k, alpha, a_data, lda, stride_a, b_data, ldb, stride_b, beta,
               c_data, ldc, stride_c, batch, a.dtype(), c.dtype());
  if (c_padded.defined())
    RETORT_CUDA_CHECK(cudaMemcpy2DAsync(c_ref.data, n * c_size, c_data, ldc * c_size, n * c_size, rows,
                                        cudaMemcpyDeviceToDevice, rc::current_stream()));
}

namespace {

// ---- cuBLASLt with an epilogue ---------------------------------------------------------------------------
// Descriptors of one call, destroyed on every path out (the creates throw through RETORT_CUBLAS_CHECK).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  RETORT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

// One column-major problem D [m, n] = op(A) op(B) (alpha 1, beta 0) with an epilogue, in one dtype (D in float32
// when d_f32), or `batch` of them with A and B `stride_a` and `stride_b` elements apart and D m * n apart.
struct LtProblem {
  cublasOperation_t trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;  // ldd = m
  cudaDataType type;
  cublasLtEpilogue_t epilogue;
  void* bias;  // the bias (read) or the bias gradient (written), length per the epilogue
  void* aux;   // the GELU input, ld m; null when the epilogue has none
  bool d_f32 = false;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0;
};

// The heuristic's pick depends on the shapes, the epilogue and the pointers' alignment; training asks for the
// same few products every step, so the answer (or that there is none) is kept per device.
using AlgoKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, int, int, int, int64_t, int64_t>;

// (std::optional of the algorithm struct trips nvcc's front end, hence the flag.)
struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct AlgoCache {
  std::mutex mutex;
  std::map<AlgoKey, CachedAlgo> algos;
};

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

// The largest power of two up to 16 that divides the address: the alignment the heuristic is told to assume
// (its default, 256 bytes, would admit kernels that a view's offset breaks).
uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

const char* epilogue_name(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "the bias epilogue";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "the bias + GELU epilogue";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "the bias-gradient epilogue";
    default:
      return "an epilogue";
  }
}

bool run_lt_matmul(const LtProblem& p);

// Runs the product on the current device's stream; false (nothing written) when cuBLASLt has no kernel for it,
// which is noted once per shape.
bool lt_matmul(const LtProblem& p) {
  if (run_lt_matmul(p)) return true;
  note_epilogue_fallback(fmt::vformat(
      "{} of a {} product, column-major [{} x {}] = op(A) op(B) with k = {} (trans {}{})",
      fmt::make_format_args(epilogue_name(p.epilogue), p.type == CUDA_R_16BF ? "bf16" : "f32", p.m, p.n, p.k,
                            p.trans_a == CUBLAS_OP_T ? "T" : "N", p.trans_b == CUBLAS_OP_T ? "T" : "N")));
  return false;
}

bool run_lt_matmul(const LtProblem& p) {
  LtDescriptors desc;
  RETORT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.trans_a));
  set_attribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.trans_b));
  set_attribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(p.epilogue));
  if (p.bias) set_attribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux) {
    set_attribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_attribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.m);
  }
  const bool a_plain = p.trans_a == CUBLAS_OP_N, b_plain = p.trans_b == CUBLAS_OP_N;
  RETORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, p.type, a_plain ? p.m : p.k, a_plain ? p.k : p.m, p.lda));
  RETORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, p.type, b_plain ? p.k : p.n, b_plain ? p.n : p.k, p.ldb));
  RETORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, p.d_f32 ? CUDA_R_32F : p.type, p.m, p.n, p.m));
  if (p.batch > 1) {
    const int32_t count = p.batch;
    const int64_t strides[3] = {p.stride_a, p.stride_b, p.m * p.n};
    const cublasLtMatrixLayout_t layouts[3] = {desc.a, desc.b, desc.d};
    for (int i = 0; i < 3; ++i) {
      RETORT_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      RETORT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                           &strides[i], sizeof(strides[i])));
    }
  }
  size_t workspace_bytes = 0;
  void* workspace = rc::cublas_workspace(&workspace_bytes);
  cublasLtHandle_t handle = rc::cublaslt_handle();

  const uint32_t align_a = alignment_of(p.a), align_b = alignment_of(p.b), align_d = alignment_of(p.d);
  const AlgoKey key{rc::current_device(),
                    static_cast<int>(p.type),
                    static_cast<int>(p.epilogue),
                    p.m,
                    p.n,
                    p.k,
                    static_cast<int>(p.trans_a) * 2 + static_cast<int>(p.trans_b),
                    static_cast<int>(p.lda % 8),
                    static_cast<int>(p.ldb % 8 + 8 * (align_a + 32 * (align_b + 32 * align_d))),
                    static_cast<int>(p.d_f32) + 2 * p.batch,
                    p.stride_a,
                    p.stride_b};
  CachedAlgo algo;
  bool cached = false;
  {
    AlgoCache& cache = algo_cache();
    std::lock_guard lock(cache.mutex);
    auto it = cache.algos.find(key);
    if (it != cache.algos.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (cached && !algo.found) return false;
  if (!cached) {
    RETORT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
    const uint64_t max_workspace = workspace_bytes;
    RETORT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &max_workspace, sizeof(max_workspace)));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
    for (const auto& [attribute, bytes] : alignments)
      RETORT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, attribute, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d,
                                                                 desc.preference, 1, &result, &found);
    // A failed query (NOT_SUPPORTED, or INVALID_VALUE for a combination this cuBLASLt version rejects) or no result
    // means no kernel for this epilogue, dtype and layout: the caller computes the same in separate kernels.
    if (status == CUBLAS_STATUS_SUCCESS && found > 0) algo = {true, result.algo};
    AlgoCache& cache = algo_cache();
    std::lock_guard lock(cache.mutex);
    cache.algos[key] = algo;
    if (!algo.found) return false;
  }
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t status =
      cublasLtMatmul(handle, desc.op, &alpha, p.a, desc.a, p.b, desc.b, &beta, p.d, desc.d, p.d, desc.d, &algo.algo,
                     workspace, workspace_bytes, rc::current_stream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    AlgoCache& cache = algo_cache();
    std::lock_guard lock(cache.mutex);
    cache.algos[key] = CachedAlgo{};
    return false;
  }
  RETORT_CUBLAS_CHECK(status);
  return true;
}

// The epilogues read and write the bias and the GELU input with the output's element type and the aux matrix
// with a leading dimension that is a multiple of 8; other layouts take the unfused path at once.
bool epilogue_layout_ok(const Tensor& bias, int64_t aux_ld, bool with_aux) {
  if (bias.defined() && !aligned16(bias.raw_data())) return false;
  return !with_aux || aux_ld % 8 == 0;
}

// out = x W^T with cuBLASLt's `epilogue` (bias may be undefined, aux null): row-major out [M, N] is column-major
// D [N, M] = W (stored [K, N] column-major, transposed) x^T. False when cuBLASLt has no kernel for it.
bool linear_with_epilogue(const Tensor& x, const Tensor& weight, Tensor& out, cublasLtEpilogue_t epilogue,
                          const Tensor& bias, void* aux) {
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  return lt_matmul(LtProblem{CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, weight.raw_data(), K, x.raw_data(), K, out.raw_data(),
                             cuda_type(x.dtype()), epilogue, bias.defined() ? bias.raw_data() : nullptr, aux});
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor& pre_gelu) {
  rc::DeviceGuard guard(device_of(out, "linear_forward"));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (M == 0 || N == 0) return;
  const bool gelu = pre_gelu.defined();
  if (K > 0 && bias.defined() && epilogue_layout_ok(bias, N, gelu) && (!gelu || aligned16(pre_gelu.raw_data())) &&
      linear_with_epilogue(x, weight, out, gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS, bias,
                           gelu ? pre_gelu.raw_data() : nullptr))
    return;
  // No epilogue for this case: the same result in separate passes.
  Tensor& product = gelu ? pre_gelu : out;
  gemm(x, weight, product, false, true, 1.0f, 0.0f);
  if (bias.defined()) add_bias(product, bias, product);
  if (gelu) gelu_forward(pre_gelu, out);
}

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "linear_gelu_forward"));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (M == 0 || N == 0) return;
  // The epilogue that writes gelu(v) alone, no aux matrix; otherwise linear_forward's passes with a scratch input.
  if (K > 0 && epilogue_layout_ok(bias, N, false) &&
      linear_with_epilogue(x, weight, out, bias.defined() ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU, bias,
                           nullptr))
    return;
  Tensor pre = Tensor::empty(out.shape(), out.dtype(), out.device());
  linear_forward(x, weight, bias, out, pre);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dweight, Tensor& dbias) {
  rc::DeviceGuard guard(device_of(dweight, "linear_weight_grad"));
  const int64_t M = dy.size(0), N = dy.size(1), K = x.size(1);
  if (N == 0) return;
  if (M > 0 && K > 0 && dbias.defined() && epilogue_layout_ok(dbias, 0, false)) {
    // Row-major dW [N, K] is column-major D [K, N] = x^T (column-major [K, M]) dy (column-major [N, M],
    // transposed); the bias gradient reduces B = dy over the product's inner dimension M (BGRADB).
    const LtProblem p{CUBLAS_OP_N,
                      CUBLAS_OP_T,
                      K,
                      N,
                      M,
                      x.raw_data(),
                      K,
                      dy.raw_data(),
                      N,
                      dweight.raw_data(),
                      cuda_type(dy.dtype()),
                      CUBLASLT_EPILOGUE_BGRADB,
                      dbias.raw_data(),
                      nullptr};
    if (lt_matmul(p)) return;
  }
  gemm(dy, x, dweight, true, false, 1.0f, 0.0f);
  if (dbias.defined()) sum_rows(dy, dbias, 0.0f);
}

bool linear_partials(const Tensor& x, const Tensor& weight, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "linear_partials"));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0), S = partials.size(0), slice = K / S;
  if (x.dtype() != DType::BF16 && x.dtype() != DType::F32) return false;
  if (M == 0 || N == 0) return true;
  if (slice == 0) {
    fill(partials, 0.0);
    return true;
  }
  // Row-major partials[s] [M, N] is column-major D_s [N, M] = W_s (column-major [slice, N] with ld K, transposed)
  // x_s^T (column-major [slice, M] with ld K); W_s and x_s start s * slice values in.
  LtProblem p{CUBLAS_OP_T,
              CUBLAS_OP_N,
              N,
              M,
              slice,
              weight.raw_data(),
              K,
              x.raw_data(),
              K,
              partials.raw_data(),
              cuda_type(x.dtype()),
              CUBLASLT_EPILOGUE_DEFAULT,
              nullptr,
              nullptr};
  p.d_f32 = true;
  p.batch = static_cast<int>(S);
  p.stride_a = p.stride_b = slice;
  return run_lt_matmul(p);
}

}  // namespace retort::kernels::cuda
