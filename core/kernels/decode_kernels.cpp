// Argument checks of the decode kernels, then dispatch on the device of the tensors (as kernels.cpp does).
#include "core/kernels/decode_kernels.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <string>

#include "core/kernels/dispatch.h"
#include "core/kernels/kernels.h"
#include "core/profile/op_profiler.h"
#include "core/tensor/slicing.h"
#include "core/util/environment_switch.h"
#include "core/util/error.h"

namespace retort::kernels {

using dispatch::same_device;

namespace {

void vector_of(const Tensor& t, int64_t n, DType dtype, const char* what, const char* op) {
  if (!t.defined()) return;
  RETORT_CHECK(t.ndim() == 1 && t.size(0) == n && t.dtype() == dtype, "{}: {} {} should be {}[{}]", op, what,
               t.describe(), dtype_name(dtype), n);
}

// partials: `sums` [S, M, N] with S >= 1 (linear_partials' output, add_partials_norm's input).
void check_partials(const Tensor& partials, int64_t M, int64_t N, DType sums, const char* op) {
  RETORT_CHECK(partials.ndim() == 3 && partials.size(0) >= 1 && partials.size(1) == M && partials.size(2) == N &&
                   partials.dtype() == sums,
               "{}: partials {} should be {}[S, {}, {}]", op, partials.describe(), dtype_name(sums), M, N);
}

std::atomic<bool>& dependent_launch_state() {
  static std::atomic<bool> enabled{!switched_off_in_environment("RETORT_DECODE_PDL")};
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

NormedLinear fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight,
                                   const Tensor& bias) {
  const char* op = "fold_norm_into_linear";
  RETORT_CHECK(weight.defined() && weight.ndim() == 2 && is_floating(weight.dtype()), "{}: weight {} should be [N, K]",
               op, weight.describe());
  const int64_t N = weight.size(0), K = weight.size(1);
  const DType dtype = weight.dtype();
  RETORT_CHECK(norm_weight.defined() && (norm_weight.dtype() == dtype || norm_weight.dtype() == DType::F32),
               "{}: the norm's weight {} should be {}[{}] or f32[{}]", op, norm_weight.describe(), dtype_name(dtype), K,
               K);
  vector_of(norm_weight, K, norm_weight.dtype(), "the norm's weight", op);
  vector_of(norm_bias, K, norm_weight.dtype(), "the norm's bias", op);
  vector_of(bias, N, dtype, "the bias", op);
  same_device({&norm_weight, &norm_bias, &weight, &bias}, op);
  const DType sums = sums_dtype(dtype);
  NormedLinear out{Tensor::empty({N, K}, dtype, weight.device()), Tensor::empty({N}, sums, weight.device()),
                   Tensor::empty({N}, sums, weight.device())};
  RETORT_DISPATCH(weight.device(), fold_norm_into_linear, norm_weight, norm_bias, weight, bias, out);
  return out;
}

bool gpt_decode_layers_fits(int64_t rows, int64_t width, int64_t n_head, DType dtype, Device device) {
  if (rows < 1 || width < 1 || n_head < 1 || width % n_head != 0 || !is_floating(dtype)) return false;
  if (!device.is_cuda()) return true;
#ifdef RETORT_WITH_CUDA
  return dtype == DType::BF16 && rows <= kDecodeLayersMaxRows && width / n_head == kDecodeLayersHead &&
         width % 256 == 0 && width <= 1024 && cuda::gpt_decode_layers_shared_fits(rows, width);
#else
  return false;
#endif
}

void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out) {
  const char* op = "gpt_decode_layers";
  RETORT_CHECK(x.ndim() == 2 && n_head >= 1 && x.size(1) % n_head == 0,
               "{}: x {} must be [B, C] with C a multiple of the {} heads", op, x.describe(), n_head);
  const int64_t B = x.size(0), C = x.size(1), D = C / n_head;
  const DType dtype = x.dtype();
  RETORT_CHECK(!layers.empty(), "{}: no layers", op);
  RETORT_CHECK(gpt_decode_layers_fits(B, C, n_head, dtype, x.device()),
               "{}: {} rows of width {} with {} heads in {} do not fit the kernel (CUDA: bf16, 1 to {} rows, heads of "
               "{}, a width that is a multiple of 256 up to 1024)",
               op, B, C, n_head, dtype_name(dtype), kDecodeLayersMaxRows, kDecodeLayersHead);
  RETORT_CHECK(starts.dtype() == DType::I32 && starts.numel() == B, "{}: starts {} should be i32[{}]", op,
               starts.describe(), B);
  RETORT_CHECK(out.shape() == x.shape() && out.dtype() == dtype, "{}: out {} should be like x {}", op, out.describe(),
               x.describe());
  same_device({&x, &starts, &out}, op);
  const Tensor& first = layers.front().k_cache;
  const DType sums = sums_dtype(dtype);
  for (const GptDecodeLayer& l : layers) {
    same_device({&x, &l.qkv.weight, &l.qkv.colsum, &l.qkv.shift, &l.proj_weight, &l.proj_bias, &l.fc.weight,
                 &l.fc.colsum, &l.fc.shift, &l.out_weight, &l.out_bias, &l.k_cache, &l.v_cache},
                op);
    const auto matrix = [&](const Tensor& w, const Tensor& b, int64_t n, int64_t k, const char* what) {
      RETORT_CHECK(w.ndim() == 2 && w.size(0) == n && w.size(1) == k && w.dtype() == dtype,
                   "{}: the {} weight {} should be {}[{}, {}]", op, what, w.describe(), dtype_name(dtype), n, k);
      vector_of(b, n, dtype, what, op);
    };
    const auto folded = [&](const NormedLinear& f, int64_t n, const char* what) {
      matrix(f.weight, Tensor(), n, C, what);
      RETORT_CHECK(f.colsum.defined() && f.shift.defined(),
                   "{}: the {} product has no column sums or shift: fold its LayerNorm with fold_norm_into_linear", op,
                   what);
      vector_of(f.colsum, n, sums, what, op);
      vector_of(f.shift, n, sums, what, op);
    };
    folded(l.qkv, 3 * C, "q|k|v");
    folded(l.fc, 4 * C, "MLP");
    matrix(l.proj_weight, l.proj_bias, C, C, "attention projection");
    matrix(l.out_weight, l.out_bias, C, 4 * C, "MLP projection");
    RETORT_CHECK(l.k_cache.ndim() == 4 && l.k_cache.size(0) == B && l.k_cache.size(1) == n_head &&
                     l.k_cache.size(3) == D && l.k_cache.dtype() == dtype && l.v_cache.shape() == l.k_cache.shape() &&
                     l.v_cache.dtype() == dtype && l.k_cache.size(2) == first.size(2),
                 "{}: the caches {} / {} should be {}[{}, {}, cap, {}], one cap for every layer", op,
                 l.k_cache.describe(), l.v_cache.describe(), dtype_name(dtype), B, n_head, D);
  }
  RETORT_DISPATCH(x.device(), gpt_decode_layers, x, layers, starts, n_head, eps, out);
}

void linear_partials(const Tensor& x, const Tensor& weight, Tensor& partials) {
  const char* op = "linear_partials";
  same_device({&x, &weight, &partials}, op);
  RETORT_CHECK(x.ndim() == 2 && weight.ndim() == 2 && x.size(1) == weight.size(1) && weight.dtype() == x.dtype() &&
                   is_floating(x.dtype()),
               "{}: x {} must be [M, K] and weight {} [N, K], one floating dtype", op, x.describe(), weight.describe());
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  const DType sums = sums_dtype(x.dtype());
  check_partials(partials, M, N, sums, op);
  const int64_t S = partials.size(0);
  RETORT_CHECK(K % S == 0, "{}: K = {} does not split into {} equal slices", op, K, S);
  profile::Range range(op, x.device());
#ifdef RETORT_WITH_CUDA
  if (x.device().is_cuda() && cuda::linear_partials(x, weight, partials)) return;
#endif
  // Each slice as a product of its own, in the partials' dtype.
  const int64_t slice = K / S;
  for (int64_t s = 0; s < S; ++s) {
    Tensor out = partials.rows(s, 1).view({M, N});
    gemm(narrow_copy(x, 1, s * slice, slice).to(sums), narrow_copy(weight, 1, s * slice, slice).to(sums), out, false,
         true, 1.0f, 0.0f);
  }
}

void add_partials_norm(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum,
                       Tensor& y) {
  const char* op = "add_partials_norm";
  same_device({&x, &partials, &bias, &norm.weight, &norm.bias, &sum, &y}, op);
  RETORT_CHECK(x.ndim() == 2 && is_floating(x.dtype()), "{}: x {} must be [M, N], floating", op, x.describe());
  const int64_t M = x.size(0), N = x.size(1);
  const DType sums = sums_dtype(x.dtype());
  check_partials(partials, M, N, sums, op);
  vector_of(bias, N, x.dtype(), "bias", op);
  RETORT_CHECK(sum.shape() == x.shape() && sum.dtype() == x.dtype(), "{}: sum {} should be like x {}", op,
               sum.describe(), x.describe());
  const bool normed = norm.kind != RowNormKind::None;
  RETORT_CHECK(normed == y.defined() && (!normed || (y.shape() == x.shape() && y.dtype() == x.dtype())),
               "{}: y {} should be like x {} with a norm, undefined without one", op,
               y.defined() ? y.describe() : std::string("undefined"), x.describe());
  if (normed)
    RETORT_CHECK(norm.weight.defined() && norm.weight.numel() == N &&
                     (!norm.bias.defined() || (norm.kind == RowNormKind::LayerNorm && norm.bias.numel() == N)),
                 "{}: the norm's weight {} / bias should have {} values (a bias for LayerNorm only)", op,
                 norm.weight.defined() ? norm.weight.describe() : std::string("undefined"), N);
  profile::Range range(op, x.device());
#ifdef RETORT_WITH_CUDA
  if (x.device().is_cuda() && cuda::add_partials_norm(x, partials, bias, norm, sum, y)) return;
#endif
  // The reference: the partials added in order, the bias, one rounding to x's dtype, then the fused add and norm.
  Tensor total = partials.rows(0, 1).view({M, N}).clone();
  for (int64_t s = 1; s < partials.size(0); ++s) add(total, partials.rows(s, 1).view({M, N}), total, 1.0f, 1.0f);
  if (bias.defined()) add_bias(total, bias.to(sums), total);
  const Tensor update = total.to(x.dtype());
  if (!normed) {
    add(x, update, sum, 1.0f, 1.0f);
    return;
  }
  Tensor mean = Tensor::empty({M}, DType::F32, x.device()), rstd = Tensor::empty({M}, DType::F32, x.device());
  if (norm.kind == RowNormKind::LayerNorm)
    add_layer_norm_forward(x, update, norm.weight, norm.bias, norm.eps, sum, y, mean, rstd);
  else
    add_rms_norm_forward(x, update, norm.weight, norm.eps, sum, y, rstd);
}

}  // namespace retort::kernels
