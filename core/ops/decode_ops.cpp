#include "core/ops/decode_ops.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/autograd/grad_mode.h"
#include "core/ops/fusion.h"
#include "core/tensor/device_runtime.h"
#include "core/tensor/slicing.h"
#include "core/util/environment_switch.h"
#include "core/util/error.h"

namespace retort::ops {
namespace {

// The rows up to which a decode step takes the fused products by default, by the model's width (x's K). At GPT-2
// small's shape (width 768; bf16, CUDA graphs) the fused step on the CUDA-core kernel is 1.52x the unfused one at 1
// row, 1.35x at 2, 1.04x at 4 (H100, bench/results/2026-11-26-h100-decode-fused/run2); past 4 rows the products run on
// the tensor cores, 1.15x the unfused step at 8 rows, 1.07x at 16 and 0.84x at 32 (H200,
// bench/results/2026-11-26-decode-mma/run29): at 32 rows every block of the kernel stages and norms all the rows
// again, and cuBLAS's tiles win. At a Llama-3.2-1B shape (width 2048, SwiGLU 8192, vocabulary 128,256) the fused step
// ties at 1 row (1.319 against 1.326 ms) and loses from 2 rows on (1.449 against 1.333 ms at 2, 1.994 against 1.426
// at 16; H200, bench/results/2026-11-26-decode-attention-mma/run62.sh): each block norms rows 2.7x as long, and the
// SwiGLU kernel streams two weights.
constexpr int64_t kDefaultMaxFusedRows = 16;
constexpr int64_t kWideModelMaxFusedRows = 1;
constexpr int64_t kWideModel = 1024;  // widths above this are "wide"

// RETORT_DECODE_FUSED_MAX_ROWS in the environment (clamped to [0, kernels::kSmallMMaxRows], what small_m_linear
// takes), or -1 when unset.
int64_t max_fused_rows_from_environment() {
  static const int64_t rows = [] {
    const char* value = std::getenv("RETORT_DECODE_FUSED_MAX_ROWS");
    if (value == nullptr) return int64_t{-1};
    return std::clamp<int64_t>(std::strtoll(value, nullptr, 10), 0, kernels::kSmallMMaxRows);
  }();
  return rows;
}

// The rows up to which a decode step of a model `width` wide takes the fused products.
int64_t max_fused_rows(int64_t width) {
  const int64_t chosen = max_fused_rows_from_environment();
  if (chosen >= 0) return chosen;
  return width > kWideModel ? kWideModelMaxFusedRows : kDefaultMaxFusedRows;
}

void check_inference(std::initializer_list<const Tensor*> tensors, const char* op) {
  if (!grad_enabled()) return;
  for (const Tensor* t : tensors)
    RETORT_INPUT_CHECK(!(t->defined() && t->requires_grad()),
                       "{} is inference only: call it under NoGradGuard (it records no backward)", op);
}

}  // namespace

bool decode_fusion_allows(Device device, DType compute_dtype) {
  switch (decode_fusion()) {
    case DecodeFusion::Off:
      return false;
    case DecodeFusion::Gpu:
      return device.is_cuda() && compute_dtype == DType::BF16;
    case DecodeFusion::Everywhere:
      return is_floating(compute_dtype);
  }
  return false;
}

bool decode_fusion_applies(const Tensor& x, DType compute_dtype, int64_t widest_input) {
  if (!x.defined() || x.ndim() < 1 || !decode_fusion_allows(x.device(), compute_dtype)) return false;
  const int64_t K = x.size(-1);
  if (K <= 0) return false;
  const int64_t rows = x.numel() / K;
  return rows <= max_fused_rows(K) && kernels::small_m_linear_fits(rows, std::max(K, widest_input), compute_dtype);
}

bool decode_partial_products_apply(const Tensor& x, DType compute_dtype) {
  if (!x.defined() || x.ndim() < 1 || !decode_fusion_allows(x.device(), compute_dtype)) return false;
  if (switched_off_in_environment("RETORT_DECODE_PARTIAL_PRODUCTS")) return false;
  const int64_t K = x.size(-1);
  return K > 0 && x.numel() / K <= kPartialProductsMaxRows;
}

PartialProducts linear_partials(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_inference({&x, &weight, &bias}, "linear_partials");
  const int64_t K = x.size(-1), rows = x.numel() / std::max<int64_t>(K, 1);
  int64_t slices = kPartialSlices;
  while (slices > 1 && K % (8 * slices) != 0) --slices;
  Tensor partials = Tensor::empty({slices, rows, weight.size(0)}, kernels::sums_dtype(x.dtype()), x.device());
  kernels::linear_partials(x.view({rows, K}), weight, partials);
  return {partials, bias};
}

ResidualNorm add_partials_norm(const Tensor& x, const PartialProducts& product, const kernels::RowNorm& norm) {
  check_inference({&x, &product.partials, &product.bias, &norm.weight, &norm.bias}, "add_partials_norm");
  const int64_t N = x.size(-1), rows = x.numel() / std::max<int64_t>(N, 1);
  ResidualNorm out{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor()};
  if (norm.kind != kernels::RowNormKind::None) out.normed = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor sum_rows = out.sum.view({rows, N});
  Tensor normed_rows = out.normed.defined() ? out.normed.view({rows, N}) : Tensor();
  kernels::add_partials_norm(x.view({rows, N}), product.partials, product.bias, norm, sum_rows, normed_rows);
  return out;
}

bool gpt_decode_layers_applies(const Tensor& x, DType compute_dtype, int64_t n_head) {
  if (!x.defined() || x.dtype() != compute_dtype || (x.ndim() != 2 && !(x.ndim() == 3 && x.size(1) == 1))) return false;
  const char* choice = std::getenv("RETORT_DECODE_LAYERS");
  const std::string_view forced = choice == nullptr ? std::string_view() : std::string_view(choice);
  if (forced == "0" || !decode_fusion_allows(x.device(), compute_dtype)) return false;
  // By default on the GPU at 4 to 16 rows, where it was measured faster than the per-op fused step (H200, GPT-2
  // small: 1.05-1.07x at 4, 12 and 16 rows, a tie at 8, slower at 1-2 and past 16; docs/benchmarks.md).
  const int64_t rows = x.size(0);
  if (forced != "1" &&
      !(x.device().is_cuda() && rows >= kDecodeLayersDefaultMinRows && rows <= kDecodeLayersDefaultMaxRows))
    return false;
  return kernels::gpt_decode_layers_fits(rows, x.size(-1), n_head, compute_dtype, x.device());
}

Tensor gpt_decode_layers(const Tensor& x, const std::vector<kernels::GptDecodeLayer>& layers, const Tensor& starts,
                         int n_head, float eps) {
  check_inference({&x}, "gpt_decode_layers");
  const Tensor rows = x.view({x.size(0), x.size(-1)});
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor out_rows = out.view(rows.shape());
  kernels::gpt_decode_layers(rows, layers, starts.view({x.size(0)}), n_head, eps, out_rows);
  return out;
}

kernels::NormedLinear FoldedNormCache::get(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight,
                                           const Tensor& bias) {
  const std::array<const Tensor*, 4> sources{&norm_weight, &norm_bias, &weight, &bias};
  std::array<const void*, 4> places{};
  std::array<uint64_t, 4> stamps{};
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i]->defined()) {
      places[i] = sources[i]->raw_data();
      stamps[i] = sources[i]->impl()->storage->version();
    }
  std::lock_guard<std::mutex> lock(mutex_);
  if (folded_.weight.defined() && places == places_ && stamps == stamps_) return folded_;
  // Changed sources met during a CUDA graph capture (weights cast on every step, inside the graph): the fold becomes
  // part of the graph, reruns with every replay, and is not kept (its tensors live in the capture's memory).
  if (device_runtime::capturing(weight.device()))
    return kernels::fold_norm_into_linear(norm_weight, norm_bias, weight, bias);
  folded_ = kernels::fold_norm_into_linear(norm_weight, norm_bias, weight, bias);
  places_ = places;
  stamps_ = stamps;
  return folded_;
}

Tensor PaddedRowsCache::get(const Tensor& weight) {
  RETORT_CHECK(weight.ndim() == 2, "PaddedRowsCache: a weight [N, K], got {}", weight.describe());
  const int64_t N = weight.size(0), padded_rows = (N + 7) / 8 * 8;
  if (padded_rows == N) return weight;
  const void* place = weight.raw_data();
  const uint64_t stamp = weight.impl()->storage->version();
  std::lock_guard<std::mutex> lock(mutex_);
  if (padded_.defined() && place == place_ && stamp == stamp_) return padded_;
  Tensor padded = Tensor::zeros({padded_rows, weight.size(1)}, weight.dtype(), weight.device());
  copy_into_narrow(padded, 0, 0, weight);
  if (device_runtime::capturing(weight.device())) return padded;
  padded_ = padded;
  place_ = place;
  stamp_ = stamp;
  return padded_;
}

Tensor small_m_linear(const Tensor& x, const kernels::RowNorm& norm, const Tensor& weight, const Tensor& bias,
                      kernels::LinearEpilogue epilogue, const Tensor& residual, const Tensor& weight2,
                      const Tensor& bias2) {
  check_inference({&x, &weight, &bias, &residual, &weight2, &bias2, &norm.weight, &norm.bias}, "small_m_linear");
  RETORT_CHECK(weight.ndim() == 2 && x.ndim() >= 1 && x.size(-1) == weight.size(1),
               "small_m_linear: input {} does not match weight {} ([out, in])", x.describe(), weight.describe());
  const int64_t K = weight.size(1), N = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor out2 = out.view({-1, N});
  const Tensor res2 = residual.defined() ? residual.view({-1, N}) : Tensor();
  kernels::small_m_linear(x.view({-1, K}), norm, weight, bias, weight2, bias2, res2, epilogue, out2);
  return out;
}

Tensor embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, DType dtype) {
  check_inference({&table, &table2}, "embedding_sum");
  Shape out_shape = ids.shape();
  out_shape.push_back(table.size(1));
  Tensor out = Tensor::empty(out_shape, dtype, table.device());
  Tensor out2 = out.view({ids.numel(), table.size(1)});
  kernels::embedding_sum(table, ids, table2, ids2, out2);
  return out;
}

}  // namespace retort::ops
