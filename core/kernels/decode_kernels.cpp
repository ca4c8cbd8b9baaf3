// Argument checks of the decode kernels, then dispatch on the device of the tensors (as kernels.cpp does).
#include "core/kernels/decode_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "core/kernels/dispatch.h"
#include "core/profile/op_profiler.h"
#include "core/util/error.h"

namespace retort::kernels {

using dispatch::same_device;

namespace {

void vector_of(const Tensor& t, int64_t n, DType dtype, const char* what, const char* op) {
  if (!t.defined()) return;
  RETORT_CHECK(t.ndim() == 1 && t.size(0) == n && t.dtype() == dtype, "{}: {} {} should be {}[{}]", op, what,
               t.describe(), dtype_name(dtype), n);
}

bool from_environment() {
  const char* value = std::getenv("RETORT_DECODE_PDL");
  if (value == nullptr) return true;
  const std::string_view v(value);
  return !(v == "0" || v == "off" || v == "false");
}

std::atomic<bool>& dependent_launch_state() {
  static std::atomic<bool> enabled{from_environment()};
  return enabled;
}

}  // namespace

bool decode_dependent_launch_enabled() {
  return dependent_launch_state().load(std::memory_order_relaxed);
}

void set_decode_dependent_launch_enabled(bool enabled) {
  dependent_launch_state().store(enabled, std::memory_order_relaxed);
}

bool small_m_linear_fits(int64_t rows, int64_t in_features, DType dtype) {
  return rows >= 1 && rows <= kSmallMMaxRows && in_features >= 1 &&
         in_features * static_cast<int64_t>(dtype_size(dtype)) <= kSmallMSharedBytes;
}

void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out) {
  const char* op = "small_m_linear";
  same_device({&x, &norm.weight, &norm.bias, &weight, &bias, &weight2, &bias2, &residual, &out}, op);
  RETORT_CHECK(x.ndim() == 2 && weight.ndim() == 2 && x.size(1) == weight.size(1),
               "{}: x {} must be [M, K] and weight {} [N, K]", op, x.describe(), weight.describe());
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  const DType dtype = x.dtype();
  RETORT_CHECK(is_floating(dtype), "{}: needs floating-point rows, got {}", op, x.describe());
  RETORT_CHECK(small_m_linear_fits(M, K, dtype),
               "{}: {} rows of {} values of {} do not fit one launch (at most {} rows)", op, M, K, dtype_name(dtype),
               kSmallMMaxRows);
  RETORT_CHECK(weight.dtype() == dtype, "{}: weight {} must have the dtype of x {}", op, weight.describe(),
               x.describe());
  RETORT_CHECK(out.ndim() == 2 && out.size(0) == M && out.size(1) == N && out.dtype() == dtype,
               "{}: out {} should be {}[{}, {}]", op, out.describe(), dtype_name(dtype), M, N);
  vector_of(bias, N, dtype, "bias", op);
  const bool swiglu = epilogue == LinearEpilogue::SwiGlu;
  RETORT_CHECK(swiglu == weight2.defined(), "{}: weight2 is {} and only the SwiGlu epilogue takes it", op,
               weight2.defined() ? weight2.describe() : std::string("undefined"));
  RETORT_CHECK(!bias2.defined() || swiglu, "{}: bias2 needs the SwiGlu epilogue", op);
  if (swiglu)
    RETORT_CHECK(weight2.shape() == weight.shape() && weight2.dtype() == dtype, "{}: weight2 {} should be like {}", op,
                 weight2.describe(), weight.describe());
  vector_of(bias2, N, dtype, "bias2", op);
  const bool residual_epilogue = epilogue == LinearEpilogue::Residual;
  RETORT_CHECK(residual_epilogue == residual.defined(), "{}: the Residual epilogue and only it takes a residual", op);
  if (residual_epilogue)
    RETORT_CHECK(residual.shape() == out.shape() && residual.dtype() == dtype, "{}: residual {} should be like out {}",
                 op, residual.describe(), out.describe());
  if (norm.kind == RowNormKind::None) {
    RETORT_CHECK(!norm.weight.defined() && !norm.bias.defined(), "{}: a norm weight without a norm kind", op);
  } else {
    RETORT_CHECK(norm.weight.defined(), "{}: the norm needs its weight", op);
    const DType norm_dtype = norm.weight.dtype();
    RETORT_CHECK(norm_dtype == dtype || norm_dtype == DType::F32, "{}: norm weight {} must be {} or f32", op,
                 norm.weight.describe(), dtype_name(dtype));
    vector_of(norm.weight, K, norm_dtype, "norm weight", op);
    vector_of(norm.bias, K, norm_dtype, "norm bias", op);
    RETORT_CHECK(norm.kind == RowNormKind::LayerNorm || !norm.bias.defined(), "{}: RMSNorm has no bias", op);
  }
  RETORT_DISPATCH(x.device(), small_m_linear, x, norm, weight, bias, weight2, bias2, residual, epilogue, out);
}

void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out) {
  const char* op = "embedding_sum";
  same_device({&table, &ids, &table2, &ids2, &out}, op);
  RETORT_CHECK(table.ndim() == 2 && ids.dtype() == DType::I32, "{}: table {} must be [rows, C] and ids {} i32", op,
               table.describe(), ids.describe());
  RETORT_CHECK(table2.defined() == ids2.defined(), "{}: a second table needs its ids, and only it", op);
  if (table2.defined())
    RETORT_CHECK(table2.ndim() == 2 && table2.size(1) == table.size(1) && table2.dtype() == table.dtype() &&
                     ids2.dtype() == DType::I32 && ids2.numel() == ids.numel(),
                 "{}: table2 {} / ids2 {} do not match table {} / ids {}", op, table2.describe(), ids2.describe(),
                 table.describe(), ids.describe());
  RETORT_CHECK(is_floating(table.dtype()) && is_floating(out.dtype()) && out.ndim() == 2 &&
                   out.size(0) == ids.numel() && out.size(1) == table.size(1),
               "{}: out {} does not fit {} ids of width {}", op, out.describe(), ids.numel(), table.size(1));
  RETORT_DISPATCH(table.device(), embedding_sum, table, ids, table2, ids2, out);
}

}  // namespace retort::kernels
