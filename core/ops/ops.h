#pragma once
// Differentiable ops: each computes its result through core/kernels and records one backward node on
// the tape (when grad mode is on and an input requires a gradient). Fused ops are one node.
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::ops {

// Shapes and dtypes.
Tensor reshape(const Tensor& x, const Shape& shape);  // a view; gradient reshaped back
Tensor cast(const Tensor& x, DType dtype);            // gradient cast back to x's dtype

// Elementwise.
Tensor add(const Tensor& a, const Tensor& b);  // same shapes
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double s);
Tensor add_bias(const Tensor& x, const Tensor& bias);  // bias broadcast along the last dim
Tensor gelu(const Tensor& x);                          // tanh approximation
// silu(gate) * up, elementwise, same shapes; one fused kernel each way (the Llama/Qwen MLP).
Tensor swiglu(const Tensor& gate, const Tensor& up);

// Reductions to one element (f32, or f64 for f64 input).
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

// Matrix products, batched over leading dims; b may be 2-D and shared across the batch.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// y = x W^T + b with W [out, in] (b may be undefined): one node. On the GPU with fused kernels on
// (fusion.h), the bias is added in the product's epilogue and its gradient comes out of the weight-gradient
// product (kernels::linear_forward, linear_weight_grad).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// gelu(x W^T + b), the tanh approximation (GPT-2's MLP up-projection): one node, which keeps the GELU input for
// its backward. GPU: one cuBLASLt product with the bias + GELU epilogue; CPU (or fused kernels off): the product,
// the bias add and gelu as separate kernels, the same math.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// Over the last dimension.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
// The residual add of a pre-norm block and the norm after it, in one kernel each way: sum = x + r (the new
// residual stream, in x's dtype) and normed = layer_norm / rms_norm of sum. x and r share shape and dtype; the
// weight (and bias) may be f32 under bf16 activations (a norm kept in float32). The gradient of sum that
// reaches it from later ops is added inside the norm's backward kernel. With fused kernels off: add, then norm.
struct ResidualNorm {
  Tensor sum, normed;
};
ResidualNorm add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                            double eps = 1e-5);
ResidualNorm add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps = 1e-6);
Tensor softmax(const Tensor& x);

// Causal scaled dot-product self-attention on packed q|k|v projections [B, T, 3C] -> [B, T, C].
Tensor causal_self_attention(const Tensor& qkv, int n_head);
// Inference attention over a key/value cache (generation): qkv [B, Tn, 3C] of Tn new positions per row, row b's
// starting at starts[b]; their keys/values are written into k_cache / v_cache [B, n_head, capacity, C / n_head],
// then each new query attends its row's keys up to itself. -> [B, Tn, C]. No tape: an error when grad mode is on
// and qkv requires grad. `starts`: i32 [B] on qkv's device (what the model passes, copied once per step), or
// host positions (copied to the device on every call).
Tensor attention_with_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, const Tensor& starts, int n_head);
Tensor attention_with_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& starts,
                               int n_head);

// Rotary position embedding, Hugging Face "rotate half" layout, on x [B, T, H * head_dim] (H heads of head_dim,
// head_dim even): for each head, element j < head_dim/2 pairs with j + head_dim/2; angle = float(positions[b, t]) *
// inv_freq[j] computed in float32; out_j = x_j cos - x_{j+h} sin, out_{j+h} = x_{j+h} cos + x_j sin (h = head_dim/2).
// positions: i32 [B, T] on x's device; inv_freq: f32 [head_dim / 2] on x's device (the model computes it, with any
// frequency scaling). Result in x's dtype (math in float32). Gradient: the inverse rotation. No gradient to
// positions or inv_freq.
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim);

// Causal scaled dot-product attention with grouped-query heads: q [B, T, n_head * D], k and v [B, T, n_kv_head * D]
// (n_head % n_kv_head == 0; D = q.size(-1) / n_head, any D on the CPU, every D up to 256 on CUDA, 64 and 128
// fast); query head h reads kv head h / (n_head / n_kv_head); scale 1/sqrt(D). -> [B, T, n_head * D].
// causal_self_attention(qkv, n_head) is this op on packed projections with n_kv_head = n_head.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head);

// Inference over a key/value cache (no tape), as the fused-qkv overload above but with separate q, k, v as in
// causal_attention: k_cache / v_cache [B, n_kv_head, capacity, D]; starts i32 [B] on q's device (or host
// positions in the vector overload).
Tensor attention_with_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                               const Tensor& starts, int n_head, int n_kv_head);
Tensor attention_with_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                               const std::vector<int64_t>& starts, int n_head, int n_kv_head);

// Rows of `table` [V, C] picked by i32 `ids` of any shape -> ids.shape + [C].
Tensor embedding(const Tensor& table, const Tensor& ids);
// A vocab shard of the table: rows [row_start, row_start + rows) of a table of id_limit rows. Ids owned by
// other shards give zero rows and no gradient (the vocab-parallel embedding sums the shards afterwards).
Tensor embedding_shard(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit);

}  // namespace retort::ops
