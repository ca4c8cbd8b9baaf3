#pragma once
// The kernels of a decode step with few rows (one new token for each of a few sequences), where a step is a chain of
// matrix-vector products too small to fill the GPU and every separate launch costs as much as its work:
//
//   small_m_linear   out [M, N] = epilogue(prologue(x) [M, K] W^T + bias) for M <= kSmallMMaxRows, in one launch:
//                    the norm of each input row (LayerNorm or RMSNorm) as a prologue, the product read once from a
//                    weight streamed at memory bandwidth, and the bias, GELU, SwiGLU or residual add as an epilogue;
//   embedding_sum    the token row plus the position row, rounded once to the compute dtype, one launch;
//   fold_norm_into_linear  a LayerNorm's weight and bias folded into the product after it, once per weight;
//   linear_partials  a product x W^T left as float32 sums over S consecutive slices of K, for the norm after it to add
//                    up: past the rows small_m_linear takes, a batched cuBLASLt product with no split-K reduction
//                    kernel of its own;
//   add_partials_norm  the residual stream's update from those sums (with the product's bias) and the norm after it,
//                    in one launch;
//   gpt_decode_layers  every block of a GPT model (norms, q|k|v, cache attention, projections, MLP) for one new
//                    position a row, in one persistent launch on the GPU (core/kernels/cuda/gpt_decode_layers.cu).
//
// Same contracts as kernels.h (outputs preallocated by the caller, contiguous row-major, checks here, then dispatch
// on the device): the CPU implementation (kernels/cpu) is the reference, the CUDA one (kernels/cuda) the fast path.
// They live apart from kernels.h because they serve inference alone (no backward).
#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::kernels {

// The norm a small-m linear applies to each input row before the product.
enum class RowNormKind { None, LayerNorm, RmsNorm };
struct RowNorm {
  RowNormKind kind = RowNormKind::None;
  Tensor weight;  // [K], x's dtype or f32
  Tensor bias;    // [K] like weight (LayerNorm only; may be undefined)
  float eps = 1e-5f;
};

// What happens to each sum v = (prologue(x) W^T)[m, n] + bias[n] before the one rounding to out's dtype.
enum class LinearEpilogue {
  None,      // out = v
  Gelu,      // out = gelu(v), the tanh approximation (GPT-2's, as gelu_forward)
  Residual,  // out = round(v) + residual[m, n]: the linear layer's output added to the residual stream
  SwiGlu,    // out = silu(round(v)) * round(v2), v2 from weight2 / bias2 (the Llama MLP's gate and up)
};

// The dtype the decode kernels sum in, and keep sums in, for values of `dtype`: float64 for f64, else float32.
inline DType sums_dtype(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

// The rows small_m_linear takes; more rows go through the ordinary products. On the GPU, bf16 rows past 4 run on the
// tensor cores (K a multiple of 32, one launch, rows staged in chunks of K); other rows go to the CUDA-core kernel,
// which holds its normed rows in shared memory: up to 8 rows a launch, as many as fit kSmallMSharedBytes.
constexpr int64_t kSmallMMaxRows = 32;
// The CUDA-core kernel's normed rows of one launch: at most this many bytes (a block still fits an SM of every GPU
// retort builds for, with room for a second one on Hopper).
constexpr int64_t kSmallMSharedBytes = 96 * 1024;

// Whether small_m_linear takes `rows` input rows of `in_features` values of `dtype`: rows in [1, kSmallMMaxRows]
// and one normed row fits the CUDA-core kernel's shared memory (49,152 bf16 values, 24,576 float32 ones).
bool small_m_linear_fits(int64_t rows, int64_t in_features, DType dtype);

// x [M, K]; weight [N, K]; bias [N] or undefined; weight2 / bias2 like weight / bias (SwiGlu only, else undefined);
// residual [M, N] (Residual only, else undefined); out [M, N]. x, weights, biases, residual and out share one floating
// dtype (f32 or bf16; f64 on the CPU); the norm's weight and bias may be f32 under bf16 rows (a norm kept in float32).
// The normed row is rounded to x's dtype before the product, as a separate norm kernel would store it; products and
// sums in float32 (float64 for f64 on the CPU). M must fit small_m_linear_fits.
void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out);

// partials [S, M, N] = the S products x[:, slice s] W[:, slice s]^T over S consecutive slices of K: x [M, K] and
// weight [N, K] in one floating dtype, partials float32 (float64 for f64), K a multiple of S. GPU: one strided-batched
// cuBLASLt product (bf16 or f32; float32 compute), whose small products ran faster than one product with a split-K
// reduction kernel after it (docs/benchmarks.md). CPU: each slice through gemm.
void linear_partials(const Tensor& x, const Tensor& weight, Tensor& partials);

// The update of a residual stream x [M, N] by a product left as partials [S, M, N] (linear_partials) with its bias
// [N] (x's dtype, may be undefined), and the norm after it:
//   p   = sum_s partials[s] + bias, in float32 (float64 for f64), s in order, rounded to x's dtype (the product's
//         output as a separate product would store it);
//   sum = x + p rounded to x's dtype (the new residual stream), y = norm(sum) as layer_norm_forward / rms_norm_forward
//         of the stored sum (norm.kind None: no norm, y undefined).
// sum and y like x; norm's weight and bias as for the norm kernels. GPU: one launch for rows of up to 8,192 values in
// 16-byte packs; otherwise (and on the CPU, the reference) the same through add, add_bias, cast and the fused add and
// norm kernels.
void add_partials_norm(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum,
                       Tensor& y);

// out[i, :] = table[ids[i], :] (+ table2[ids2[i], :] when table2 is defined), summed in float32 (float64 for f64) and
// rounded once to out's dtype. table and table2 [rows, C] share a dtype; ids and ids2 i32 of one numel N; out [N, C].
// Ids out of range throw (CPU) or are reported by a device-side check (CUDA), as in embedding_forward.
void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out);

// A LayerNorm folded into the product that reads it. For a row x of K values with mean mu and 1/std r,
//   LN(x) W^T + b = r (x W'^T - mu colsum) + shift,   W' = W diag(gamma),  colsum[n] = sum_k W'[n, k],
//                                                    shift[n] = b[n] + sum_k W[n, k] beta[k],
// so a kernel can multiply the rows as they are stored and apply each row's mean and 1/std after the product, instead
// of norming every row before it (in a persistent decode kernel every CTA would norm every row again).
struct NormedLinear {
  Tensor weight;  // W' [N, K] in the weight's dtype: each element rounded once
  Tensor colsum;  // [N] f32 (f64 for f64 weights): the sums of W' as stored
  Tensor shift;   // [N] like colsum
};

// norm_weight (gamma) and norm_bias (beta, may be undefined) [K] in the weight's dtype or f32; weight [N, K]; bias [N]
// in the weight's dtype or undefined. Sums in float32 (float64 for f64). A weight or norm that changes needs a new
// fold (GptBlock keeps one per stamp of the tensors it came from).
NormedLinear fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight,
                                   const Tensor& bias);

// One GPT block's tensors for gpt_decode_layers: LN1 folded into the packed q|k|v product [3C, C] and LN2 into the
// MLP's first product [4C, C] (fold_norm_into_linear), the attention's projection [C, C] and the MLP's projection
// [C, 4C] with biases [N] (any bias may be undefined: a model without biases), and the block's key and value cache
// [B, H, cap, D], x's dtype.
struct GptDecodeLayer {
  NormedLinear qkv;
  Tensor proj_weight, proj_bias;
  NormedLinear fc;
  Tensor out_weight, out_bias;
  Tensor k_cache, v_cache;
};
// The head size, rows and layers a GPU launch of gpt_decode_layers takes (more layers take more launches).
constexpr int64_t kDecodeLayersHead = 64;
constexpr int64_t kDecodeLayersMaxRows = 32;
constexpr int kDecodeLayersPerLaunch = 16;

// Whether gpt_decode_layers takes `rows` rows of a model `width` wide with `n_head` heads in `dtype` on `device`: on
// the CPU (the reference) any floating dtype and heads; on the GPU bf16, 1 to 32 rows, heads of 64, a width that is a
// multiple of 256 up to 1024 whose staged rows fit a multiprocessor's shared memory.
bool gpt_decode_layers_fits(int64_t rows, int64_t width, int64_t n_head, DType dtype, Device device);

// x [B, C], one new position a row at position starts[b] (i32 [B]) of its cache. For each layer in order:
//   h += proj(attention(qkv(LN1(h))))   (the new key and value appended at starts[b]; dropped at or past cap)
//   h += out(gelu(fc(LN2(h))))          (GELU's tanh approximation)
// out [B, C] = the last h, rounded once to x's dtype. Each LayerNorm is applied through its fold (NormedLinear): the
// product reads h rounded to x's dtype, as a separate norm kernel would find it stored, and each row's mean and
// 1/std of those values (eps `eps`) come in after the product. q|k|v, the attention output and the MLP's hidden rows
// are rounded to x's dtype as separate kernels would store them; h itself stays float32 (float64 for f64) from layer
// to layer; sums in float32 (float64 for f64).
void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out);

// Programmatic dependent launch of the small-m kernels on the GPU (on by default; RETORT_DECODE_PDL=0 turns it off):
// each kernel may start while the one before it finishes, prefetches its weights into L2 and waits for the earlier
// results only where it reads them. Results are the same either way.
bool decode_dependent_launch_enabled();
void set_decode_dependent_launch_enabled(bool enabled);

namespace cpu {
void fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight, const Tensor& bias,
                           NormedLinear& out);
void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out);
void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out);
void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out);
}  // namespace cpu

#ifdef RETORT_WITH_CUDA
namespace cuda {
void fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight, const Tensor& bias,
                           NormedLinear& out);
void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out);
void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out);
void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out);
// Whether a launch for `rows` rows of a model `width` wide fits the current device's shared memory.
bool gpt_decode_layers_shared_fits(int64_t rows, int64_t width);
// The batched product; false (nothing written) when cuBLASLt has no kernel for it.
bool linear_partials(const Tensor& x, const Tensor& weight, Tensor& partials);
// The one-launch update; false (nothing written) for rows it does not take (not in 16-byte packs, or wider than 8,192).
bool add_partials_norm(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum,
                       Tensor& y);
}  // namespace cuda
#endif

}  // namespace retort::kernels
