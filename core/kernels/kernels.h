#pragma once
// Raw compute on tensors: no autograd, outputs preallocated by the caller, contiguous row-major layout.
// Each kernel has a CPU implementation (kernels/cpu, Eigen/OpenMP; f32, f64 and bf16 storage with float
// math) and a CUDA implementation (kernels/cuda; f32 and bf16 storage with float32 accumulation).
// The entry points below check shapes and dispatch on the device of the tensors.
#include <cstdint>

#include "core/tensor/tensor.h"

namespace retort::kernels {

// ---- elementwise -------------------------------------------------------------------------------------
void fill(Tensor& x, double value);
void cast(const Tensor& x, Tensor& out);  // dtype conversion, same shape
// out = alpha * a + beta * b (same numel; out may alias a or b).
void add(const Tensor& a, const Tensor& b, Tensor& out, float alpha, float beta);
// out = x + bias, bias broadcast along the last dimension.
void add_bias(const Tensor& x, const Tensor& bias, Tensor& out);
// out[j] = beta * out[j] + sum over all leading rows of x[..., j] (the bias gradient).
void sum_rows(const Tensor& x, Tensor& out, float beta);
void mul(const Tensor& a, const Tensor& b, Tensor& out);  // out = a * b elementwise
void scale(const Tensor& x, float s, Tensor& out);        // out = s * x (out may alias x)
// GELU with the tanh approximation (GPT-2's).
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
// SwiGLU: out = silu(gate) * up (silu(g) = g sigmoid(g)), same shapes and dtype; the backward writes both
// gradients in one pass.
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);
// Rotary position embedding, Hugging Face's rotate-half layout: x and out [B, T, H * head_dim] (out may alias x),
// positions i32 [B, T], inv_freq f32 [head_dim / 2]. Per head, element j < head_dim / 2 pairs with j + head_dim / 2
// at angle float32(positions[b, t]) * inv_freq[j] (a float32 product): out_j = x_j cos - x_{j+h} sin,
// out_{j+h} = x_{j+h} cos + x_j sin. `inverse` rotates by minus the angle (the gradient).
void rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim, bool inverse,
                      Tensor& out);

// ---- reductions (results are f32 one-element tensors on the same device, f64 for f64 input) -----------
void sum(const Tensor& x, Tensor& out);
void sum_squares(const Tensor& x, Tensor& out);

// ---- matrix products -----------------------------------------------------------------------------------
// c = alpha * op(a) @ op(b) + beta * c, batched over leading dims.
//   a: [..., M, K] ([..., K, M] if trans_a), b: [..., K, N] ([..., N, K] if trans_b), c: [..., M, N].
//   b (or a) may be 2-D: the same matrix for every batch. a, b, c share a floating dtype, except that c
//   may be f32 when a, b are bf16. GPU: cuBLAS with float32 compute (no TF32).
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha, float beta);
// A linear layer's forward in one pass where the GPU allows: x [M, K], weight [N, K], bias [N] (may be
// undefined), out [M, N], all in one dtype. Without pre_gelu: out = x W^T + b. With pre_gelu ([M, N], defined):
// pre_gelu = x W^T + b (saved for the backward) and out = gelu(pre_gelu), the tanh approximation of
// gelu_forward. GPU: cuBLASLt with the bias (and GELU) epilogue, float32 compute, the bias added and the GELU
// taken in float32 before the one rounding to the output dtype; when cuBLASLt offers no kernel for the
// epilogue, the product, add_bias and gelu_forward. CPU: those three kernels.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor& pre_gelu);
// out = gelu(x W^T + b) as linear_forward with pre_gelu computes it, for inference: the GELU's input is not kept (the
// GPU's epilogue does not write it). Same shapes and dtypes as linear_forward.
void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out);
// The weight (and bias) gradient of y = x W^T + b: dweight [N, K] = dy^T x, and dbias [N] = dy summed over rows
// when defined, both written (not accumulated). dy [M, N], x [M, K]. GPU: one cuBLASLt product whose epilogue
// also writes the bias gradient (falls back to gemm + sum_rows where unsupported).
void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dweight, Tensor& dbias);

// ---- normalisation and softmax over the last dimension --------------------------------------------------
// mean and rstd: f32 [rows]. bias may be undefined.
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                        Tensor& rstd);
// dx is written; dweight and dbias (when defined) are accumulated into.
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias);
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                       Tensor& dweight);
// The residual add and the norm that follows it in a pre-norm block, one pass each way:
//   sum = x + r (rounded to the storage dtype: the new residual stream), y = norm(sum) as layer_norm_forward /
//   rms_norm_forward of the stored sum. x, r, sum, y share a shape and dtype; weight and bias as for the norms.
void add_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, float eps,
                            Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd);
void add_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, float eps, Tensor& sum, Tensor& y,
                          Tensor& rstd);
// dx = dsum + the norm's input gradient for dy (dsum: the gradient that reached the residual stream `sum` from
// elsewhere; may be undefined, then 0), in float32 and rounded once. dx is also r's gradient. dweight and dbias
// (when defined) are accumulated into, as in layer_norm_backward.
void add_layer_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                             const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias);
void add_rms_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight);
void softmax_forward(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

// ---- attention -----------------------------------------------------------------------------------------
// Causal scaled dot-product self-attention on packed projections.
//   qkv: [B, T, 3C] (q | k | v, each C = n_head * head_dim), out: [B, T, C], probs: [B, n_head, T, T]
//   (saved for backward; entries above the diagonal are 0).
void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs);
// dqkv: [B, T, 3C], written.
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv);
// The same with separate projections and grouped-query heads: q [B, T, n_head * D], k and v [B, T, n_kv_head * D]
// (n_head a multiple of n_kv_head; query head h reads key/value head h / (n_head / n_kv_head)), out [B, T, n_head *
// D], probs [B, n_head, T, T]. The packed overloads above are this with n_kv_head = n_head.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                       Tensor& probs);
// dq, dk, dv written (dk and dv summed over the query heads of each group).
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv);
// Fused (flash) causal attention: the same results as attention_forward / attention_backward without the [T, T]
// probabilities. The forward saves, instead, lse f32 [B, n_head, T]: log sum_j exp(q_t . k_j / sqrt(D)) over the
// keys j <= t of each row (natural log); the backward recomputes the probabilities from q, k and lse and takes the
// forward's out. CUDA only, bf16, head size 64 or 128: flash_attention_applies says whether these inputs qualify.
// Setting the environment variable RETORT_ATTENTION=materialized makes it say no, so the materialising path can be
// measured against the fused one from the same binary. Backward: dq, dk, dv written (dk and dv summed over each
// group's query heads); dq's float32 sums are added up with atomics, so it may differ in the last bit from run to run.
bool flash_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
void flash_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse);
void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                              Tensor& dqkv);
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                             Tensor& lse);
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv);
// Inference with a key/value cache. qkv [B, Tn, 3C] holds the projections of Tn NEW positions of each row, which
// start at starts[b] (i32 [B] on qkv's device). Their keys and values are written into k_cache and v_cache
// [B, n_head, capacity, C / n_head] at positions starts[b] + t (positions at or past the capacity are dropped: a
// finished row's padding), then query t of row b attends keys [0, starts[b] + t] (fewer past the capacity).
// out: [B, Tn, C]. Caches and out share qkv's dtype; scores and sums in f32 (f64 for f64 on the CPU).
void attention_with_cache(const Tensor& qkv, const Tensor& starts, int n_head, Tensor& k_cache, Tensor& v_cache,
                          Tensor& out);
// The same with separate q [B, Tn, n_head * D], k and v [B, Tn, n_kv_head * D] and caches [B, n_kv_head, capacity,
// D] (grouped-query heads as in attention_forward).
void attention_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& starts, int n_head,
                          int n_kv_head, Tensor& k_cache, Tensor& v_cache, Tensor& out);

// ---- embedding -----------------------------------------------------------------------------------------
// out[n, :] = table[ids[n], :]; ids i32 [N] (any shape, flattened); out [N, C]. Ids out of range throw (CPU)
// or are reported by a device-side check (CUDA).
void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out);
// dtable[ids[n], :] += dout[n, :] (dtable accumulated into; repeated ids add up).
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable);
// A shard of a larger table (vocab-parallel embedding): the table holds global rows [row_start, row_start +
// rows). Ids must lie in [0, id_limit) (the global vocabulary); an id owned by another shard gives a zero row
// forward and no gradient here.
void embedding_forward(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& dtable);

// ---- cross-entropy (single device; the vocab-parallel losses live in losses/) --------------------------------
// logits [N, V], targets i32 [N]. row_loss f32 [N] = lse - logit[target] (0 for ignore_index rows),
// lse f32 [N]. Returns nothing; the caller reduces.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int ignore_index, Tensor& row_loss,
                           Tensor& lse);
// dlogits[n, j] = grad_scale * (softmax(logits[n])_j - [j == target_n]), 0 for ignored rows.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int ignore_index,
                            float grad_scale, Tensor& dlogits);

// ---- top-k over the last dimension ----------------------------------------------------------------------
// x viewed as [rows, cols] (f32 or bf16; f64 on the CPU); k = values.size(-1), 1 <= k <= cols (k <= 256 on the
// GPU). Per row, the k largest entries in descending order, ties to the smaller column, so the result is
// deterministic and the same on both backends (-0 ranks equal to +0; NaN ranks above +inf: do not pass NaN).
//   values f32 [rows, k]: the entries, as float32;
//   indices i32 [rows, k]: index_base + column, or ids[row, column] when ids (i32, x's shape) is defined (a
//   final top-k over gathered candidates keeps their global ids this way);
//   row_lse f32 [rows] (optional, may be undefined): log sum_j exp(x[row, j]) read in the same pass, -inf for
//   a row whose entries are all -inf.
void topk(const Tensor& x, int64_t index_base, const Tensor& ids, Tensor& values, Tensor& indices, Tensor& row_lse);

}  // namespace retort::kernels
