#pragma once
// The ops of a decode step with few rows, on the kernels of core/kernels/decode_kernels.h: a linear layer with the
// norm before it and its bias, GELU, SwiGLU or residual add after it in one launch, and the embedding in one launch.
// Inference only: no tape (an error when grad mode is on and an input requires a gradient). Whether a model takes
// them is decode_fusion_applies (the switch of core/ops/fusion.h, the device, the dtype, the rows).
#include <array>
#include <cstdint>
#include <mutex>

#include "core/kernels/decode_kernels.h"
#include "core/ops/ops.h"
#include "core/tensor/tensor.h"

namespace retort::ops {

// Whether a decode step over the rows x [..., K] in `compute_dtype` takes the fused ops: the switch (fusion.h) allows
// x's device and dtype (Gpu: CUDA and bf16; Everywhere: any device and floating dtype) and the rows fit one launch
// (kernels::small_m_linear_fits), at most 16 rows for a model up to 1024 wide (K) and 1 row for a wider one (where the
// fused step was measured faster than the unfused one, or as fast), or RETORT_DECODE_FUSED_MAX_ROWS (0 to 32) when
// set. `widest_input`: the widest input of the step's later products
// (the MLP's down projection), whose rows must fit one launch too; 0 when none is wider than K.
bool decode_fusion_applies(const Tensor& x, DType compute_dtype, int64_t widest_input = 0);
// Whether a decode step over rows x [..., K] past decode_fusion_applies' limit leaves the products before a norm (a
// GPT block's attention and MLP output projections) as float32 partial sums for that norm to add up
// (linear_partials, add_partials_norm): the fusion switch allows x's device and dtype, the rows are at most
// kPartialProductsMaxRows, and RETORT_DECODE_PARTIAL_PRODUCTS is not 0 (read on every call).
constexpr int64_t kPartialProductsMaxRows = 64;
bool decode_partial_products_apply(const Tensor& x, DType compute_dtype);

// The same without the rows' limit: for embedding_sum, which computes exactly what the separate lookups, add and
// cast compute, at any number of rows.
bool decode_fusion_allows(Device device, DType compute_dtype);

// Whether a GPT decode step over x [B, 1, C] (or [B, C]) in `compute_dtype` runs its blocks through
// gpt_decode_layers (one launch for every block, kernels/decode_kernels.h): the fusion switch allows the fused ops on
// x's device (fusion.h; the CPU runs the reference kernel), one new position a row, the kernel takes the shape
// (kernels::gpt_decode_layers_fits), and either RETORT_DECODE_LAYERS=1 (read on every call) or, without the setting,
// a GPU step of kDecodeLayersDefaultMinRows to kDecodeLayersDefaultMaxRows rows, where it was measured faster than the
// per-op fused step. RETORT_DECODE_LAYERS=0 turns it off.
constexpr int64_t kDecodeLayersDefaultMinRows = 4;
constexpr int64_t kDecodeLayersDefaultMaxRows = 16;
bool gpt_decode_layers_applies(const Tensor& x, DType compute_dtype, int64_t n_head);

// A product left as float32 partial sums over slices of K, with the bias the norm after it adds (inference only).
struct PartialProducts {
  Tensor partials;  // f32 [S, rows, N] (f64 for f64)
  Tensor bias;      // [N] or undefined
};
// x [..., K] W^T as kPartialSlices (or fewer: K must split into slices of whole 16-byte packs) partial sums.
constexpr int64_t kPartialSlices = 4;
PartialProducts linear_partials(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The residual stream x [..., N] plus the product (rounded to x's dtype as a separate product would store it), and
// `norm` of that sum (kernels::add_partials_norm): {sum, normed}; normed undefined for RowNormKind::None.
ResidualNorm add_partials_norm(const Tensor& x, const PartialProducts& product, const kernels::RowNorm& norm);

// x [B, 1, C] or [B, C] through `layers` (kernels::gpt_decode_layers), one new position a row at starts (i32 [B]) of
// the layers' caches -> the last residual, shaped like x.
Tensor gpt_decode_layers(const Tensor& x, const std::vector<kernels::GptDecodeLayer>& layers, const Tensor& starts,
                         int n_head, float eps);

// A LayerNorm folded into the product after it (kernels::fold_norm_into_linear), kept between decode steps and folded
// again when any of its four tensors changed: a different place, or new contents (the storage's stamp, which every
// write through Tensor::copy_ or an optimizer step renews). A fold made while a CUDA graph is captured is returned
// but not kept. One per product of a model; safe to share between threads.
class FoldedNormCache {
 public:
  kernels::NormedLinear get(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight,
                            const Tensor& bias);

 private:
  std::mutex mutex_;
  kernels::NormedLinear folded_;
  std::array<const void*, 4> places_{};
  std::array<uint64_t, 4> stamps_{};
};

// A weight [N, K] with N rounded up to a multiple of 8 by zero rows, kept while the weight stays as it is (its place
// and its storage's stamp, as FoldedNormCache), made again when it changes; a copy made while a CUDA graph is
// captured is returned but not kept. cuBLAS runs a 16-bit product whose output width is not a multiple of 8 on slow
// kernels, and gemm's remedy for a large one, padded copies of its operands, copies the weight every call: GPT-2's
// 50,257-id head then cost a batch-32 decode step 0.1 ms (docs/benchmarks.md). One per weight; safe to share
// between threads. A weight whose N is already a multiple of 8 is returned as it is.
class PaddedRowsCache {
 public:
  Tensor get(const Tensor& weight);

 private:
  std::mutex mutex_;
  Tensor padded_;
  const void* place_ = nullptr;
  uint64_t stamp_ = 0;
};

// epilogue(norm(x) W^T + bias) over x [..., K], W [N, K] -> [..., N] in x's dtype (kernels::small_m_linear: the normed
// row and a linear output that is added or gated rounded as separate kernels would store them). residual [..., N]
// for the Residual epilogue, weight2 (and bias2) for SwiGlu; undefined otherwise.
Tensor small_m_linear(const Tensor& x, const kernels::RowNorm& norm, const Tensor& weight, const Tensor& bias,
                      kernels::LinearEpilogue epilogue = kernels::LinearEpilogue::None, const Tensor& residual = {},
                      const Tensor& weight2 = {}, const Tensor& bias2 = {});

// table[ids] (+ table2[ids2]) in `dtype`, rounded once -> ids.shape + [C]: the gpt embedding (token + position
// rows) or a token lookup cast to the compute dtype, one launch.
Tensor embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, DType dtype);

}  // namespace retort::ops
