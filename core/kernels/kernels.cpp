// Argument checks shared by both backends, then dispatch on the device of the tensors.
#include "core/kernels/kernels.h"

#include <cstdlib>
#include <string_view>

#include "core/kernels/backends.h"
#ifdef RETORT_WITH_CUDA
#include "core/kernels/cuda/flash_attention.h"
#endif
#include "core/kernels/dispatch.h"
#include "core/profile/op_profiler.h"
#include "core/util/error.h"

namespace retort::kernels {

using dispatch::same_device;

namespace {

void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  RETORT_CHECK(a.shape() == b.shape(), "{}: shapes differ ({} vs {})", op, a.describe(), b.describe());
}

void floating(const Tensor& t, const char* op) {
  RETORT_CHECK(is_floating(t.dtype()), "{}: needs a floating-point tensor, got {}", op, t.describe());
}

void row_stats(const Tensor& stat, const Tensor& x, const char* op) {
  RETORT_CHECK(stat.numel() == x.numel() / std::max<int64_t>(x.size(-1), 1) &&
                   (stat.dtype() == DType::F32 || stat.dtype() == DType::F64),
               "{}: per-row statistics {} do not fit input {}", op, stat.describe(), x.describe());
}

// q [B, T, n_head * D], k and v [B, T, n_kv_head * D] in one dtype; returns D.
int64_t check_heads(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, const char* op) {
  RETORT_CHECK(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3, "{}: q {}, k {}, v {} must be [B, T, width]", op,
               q.describe(), k.describe(), v.describe());
  RETORT_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
               "{}: {} query heads do not divide into {} key/value heads", op, n_head, n_kv_head);
  RETORT_CHECK(q.size(2) % n_head == 0, "{}: width {} does not divide into {} heads", op, q.size(2), n_head);
  const int64_t D = q.size(2) / n_head;
  const Shape kv_shape{q.size(0), q.size(1), n_kv_head * D};
  RETORT_CHECK(k.shape() == kv_shape && v.shape() == kv_shape, "{}: k {} and v {} should be [{}, {}, {}]", op,
               k.describe(), v.describe(), q.size(0), q.size(1), n_kv_head * D);
  RETORT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "{}: dtypes differ (q {}, k {}, v {})", op,
               q.describe(), k.describe(), v.describe());
  floating(q, op);
  return D;
}

}  // namespace

void fill(Tensor& x, double value) {
  RETORT_DISPATCH(x.device(), fill, x, value);
}

void cast(const Tensor& x, Tensor& out) {
  same_device({&x, &out}, "cast");
  RETORT_CHECK(x.numel() == out.numel(), "cast: {} into {}", x.describe(), out.describe());
  RETORT_DISPATCH(x.device(), cast, x, out);
}

void add(const Tensor& a, const Tensor& b, Tensor& out, float alpha, float beta) {
  same_device({&a, &b, &out}, "add");
  RETORT_CHECK(a.numel() == out.numel() && b.numel() == out.numel(), "add: sizes differ ({}, {}, {})", a.describe(),
               b.describe(), out.describe());
  RETORT_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "add: dtypes differ ({}, {}, {})", a.describe(),
               b.describe(), out.describe());
  floating(out, "add");
  RETORT_DISPATCH(out.device(), add, a, b, out, alpha, beta);
}

void add_bias(const Tensor& x, const Tensor& bias, Tensor& out) {
  same_device({&x, &bias, &out}, "add_bias");
  same_shape(x, out, "add_bias");
  RETORT_CHECK(bias.numel() == x.size(-1), "add_bias: bias {} does not match the last dim of {}", bias.describe(),
               x.describe());
  RETORT_DISPATCH(out.device(), add_bias, x, bias, out);
}

void sum_rows(const Tensor& x, Tensor& out, float beta) {
  same_device({&x, &out}, "sum_rows");
  RETORT_CHECK(out.numel() == x.size(-1), "sum_rows: {} into {}", x.describe(), out.describe());
  RETORT_DISPATCH(out.device(), sum_rows, x, out, beta);
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  same_device({&a, &b, &out}, "mul");
  same_shape(a, out, "mul");
  same_shape(b, out, "mul");
  RETORT_DISPATCH(out.device(), mul, a, b, out);
}

void scale(const Tensor& x, float s, Tensor& out) {
  same_device({&x, &out}, "scale");
  RETORT_CHECK(x.numel() == out.numel(), "scale: {} into {}", x.describe(), out.describe());
  RETORT_DISPATCH(out.device(), scale, x, s, out);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  same_device({&x, &y}, "gelu");
  same_shape(x, y, "gelu");
  RETORT_DISPATCH(x.device(), gelu_forward, x, y);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  same_device({&x, &dy, &dx}, "gelu_backward");
  same_shape(x, dy, "gelu_backward");
  same_shape(x, dx, "gelu_backward");
  RETORT_DISPATCH(x.device(), gelu_backward, x, dy, dx);
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  same_device({&gate, &up, &out}, "swiglu");
  same_shape(gate, up, "swiglu");
  same_shape(gate, out, "swiglu");
  RETORT_CHECK(up.dtype() == gate.dtype() && out.dtype() == gate.dtype(), "swiglu: dtypes differ ({}, {}, {})",
               gate.describe(), up.describe(), out.describe());
  floating(gate, "swiglu");
  RETORT_DISPATCH(gate.device(), swiglu_forward, gate, up, out);
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  same_device({&gate, &up, &dout, &dgate, &dup}, "swiglu_backward");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&up, &dout, &dgate, &dup}) {
    same_shape(gate, *t, "swiglu_backward");
    RETORT_CHECK(t->dtype() == gate.dtype(), "swiglu_backward: dtypes differ ({}, {})", gate.describe(), t->describe());
  }
  floating(gate, "swiglu_backward");
  RETORT_DISPATCH(gate.device(), swiglu_backward, gate, up, dout, dgate, dup);
}

void rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim, bool inverse,
                      Tensor& out) {
  same_device({&x, &positions, &inv_freq, &out}, "rotary_embedding");
  RETORT_CHECK(x.ndim() == 3, "rotary_embedding: x {} must be [B, T, heads * head_dim]", x.describe());
  RETORT_CHECK(head_dim > 0 && head_dim % 2 == 0 && x.size(2) % head_dim == 0,
               "rotary_embedding: head_dim {} must be even and divide the width of {}", head_dim, x.describe());
  RETORT_CHECK(positions.dtype() == DType::I32 && positions.shape() == Shape({x.size(0), x.size(1)}),
               "rotary_embedding: positions {} must be i32 [{}, {}]", positions.describe(), x.size(0), x.size(1));
  RETORT_CHECK(inv_freq.dtype() == DType::F32 && inv_freq.ndim() == 1 && inv_freq.size(0) == head_dim / 2,
               "rotary_embedding: inv_freq {} must be f32 [{}]", inv_freq.describe(), head_dim / 2);
  same_shape(x, out, "rotary_embedding");
  RETORT_CHECK(out.dtype() == x.dtype(), "rotary_embedding: out {} does not match x {}", out.describe(), x.describe());
  floating(x, "rotary_embedding");
  RETORT_DISPATCH(x.device(), rotary_embedding, x, positions, inv_freq, head_dim, inverse, out);
}

void sum(const Tensor& x, Tensor& out) {
  same_device({&x, &out}, "sum");
  RETORT_CHECK(out.numel() == 1 && (out.dtype() == DType::F32 || out.dtype() == DType::F64),
               "sum: output must be one f32/f64 element, got {}", out.describe());
  RETORT_DISPATCH(x.device(), sum, x, out);
}

void sum_squares(const Tensor& x, Tensor& out) {
  same_device({&x, &out}, "sum_squares");
  RETORT_CHECK(out.numel() == 1 && (out.dtype() == DType::F32 || out.dtype() == DType::F64),
               "sum_squares: output must be one f32/f64 element, got {}", out.describe());
  RETORT_DISPATCH(x.device(), sum_squares, x, out);
}

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b, float alpha, float beta) {
  same_device({&a, &b, &c}, "gemm");
  RETORT_CHECK(a.ndim() >= 2 && b.ndim() >= 2 && c.ndim() >= 2, "gemm: operands must be at least 2-D ({}, {}, {})",
               a.describe(), b.describe(), c.describe());
  const int64_t m = c.size(-2), n = c.size(-1);
  const int64_t am = trans_a ? a.size(-1) : a.size(-2), k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t bk = trans_b ? b.size(-1) : b.size(-2), bn = trans_b ? b.size(-2) : b.size(-1);
  RETORT_CHECK(am == m && bk == k && bn == n, "gemm: shapes do not chain: {}{} x {}{} -> {}", a.describe(),
               trans_a ? "^T" : "", b.describe(), trans_b ? "^T" : "", c.describe());
  const int64_t batch = c.numel() / std::max<int64_t>(m * n, 1);
  RETORT_CHECK(a.ndim() == 2 || a.numel() == batch * m * k, "gemm: batch of {} does not match {}", a.describe(),
               c.describe());
  RETORT_CHECK(b.ndim() == 2 || b.numel() == batch * k * n, "gemm: batch of {} does not match {}", b.describe(),
               c.describe());
  RETORT_CHECK(
      a.dtype() == b.dtype() && (c.dtype() == a.dtype() || (a.dtype() == DType::BF16 && c.dtype() == DType::F32)),
      "gemm: dtypes {} x {} -> {} not supported", a.describe(), b.describe(), c.describe());
  floating(c, "gemm");
  RETORT_DISPATCH(c.device(), gemm, a, b, c, trans_a, trans_b, alpha, beta);
}

namespace {

// linear_forward's contract: x [M, K], weight [N, K], bias [N] or undefined, out (and pre_gelu when defined) [M, N],
// all in x's floating dtype on one device.
void check_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                          const Tensor& pre_gelu, const char* op) {
  same_device({&x, &weight, &bias, &out, &pre_gelu}, op);
  RETORT_CHECK(x.ndim() == 2 && weight.ndim() == 2 && x.size(1) == weight.size(1),
               "{}: x {} must be [M, K] and weight {} [N, K]", op, x.describe(), weight.describe());
  const Shape out_shape{x.size(0), weight.size(0)};
  RETORT_CHECK(out.shape() == out_shape && (!pre_gelu.defined() || pre_gelu.shape() == out_shape),
               "{}: out {} (and pre_gelu) must be [{}, {}]", op, out.describe(), out_shape[0], out_shape[1]);
  RETORT_CHECK(!bias.defined() || bias.numel() == weight.size(0), "{}: bias {} does not match weight {}", op,
               bias.describe(), weight.describe());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias, &out, &pre_gelu})
    RETORT_CHECK(!t->defined() || t->dtype() == x.dtype(), "{}: {} is not in x's dtype ({})", op, t->describe(),
                 dtype_name(x.dtype()));
  floating(x, op);
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor& pre_gelu) {
  check_linear_forward(x, weight, bias, out, pre_gelu, "linear_forward");
  RETORT_DISPATCH(x.device(), linear_forward, x, weight, bias, out, pre_gelu);
}

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  check_linear_forward(x, weight, bias, out, Tensor(), "linear_gelu_forward");
  RETORT_DISPATCH(x.device(), linear_gelu_forward, x, weight, bias, out);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dweight, Tensor& dbias) {
  same_device({&dy, &x, &dweight, &dbias}, "linear_weight_grad");
  RETORT_CHECK(dy.ndim() == 2 && x.ndim() == 2 && dy.size(0) == x.size(0),
               "linear_weight_grad: dy {} must be [M, N] and x {} [M, K]", dy.describe(), x.describe());
  RETORT_CHECK(dweight.shape() == Shape({dy.size(1), x.size(1)}), "linear_weight_grad: dweight {} must be [{}, {}]",
               dweight.describe(), dy.size(1), x.size(1));
  RETORT_CHECK(!dbias.defined() || dbias.numel() == dy.size(1), "linear_weight_grad: dbias {} must have {} elements",
               dbias.describe(), dy.size(1));
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &dweight, &dbias})
    RETORT_CHECK(!t->defined() || t->dtype() == dy.dtype(), "linear_weight_grad: {} is not in dy's dtype ({})",
                 t->describe(), dtype_name(dy.dtype()));
  floating(dy, "linear_weight_grad");
  RETORT_DISPATCH(dy.device(), linear_weight_grad, dy, x, dweight, dbias);
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                        Tensor& rstd) {
  same_device({&x, &weight, &bias, &y, &mean, &rstd}, "layer_norm");
  same_shape(x, y, "layer_norm");
  RETORT_CHECK(weight.numel() == x.size(-1) && (!bias.defined() || bias.numel() == x.size(-1)),
               "layer_norm: weight {} / bias do not match the last dim of {}", weight.describe(), x.describe());
  row_stats(mean, x, "layer_norm");
  row_stats(rstd, x, "layer_norm");
  RETORT_DISPATCH(x.device(), layer_norm_forward, x, weight, bias, eps, y, mean, rstd);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  same_device({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias}, "layer_norm_backward");
  same_shape(dy, x, "layer_norm_backward");
  same_shape(dx, x, "layer_norm_backward");
  RETORT_DISPATCH(x.device(), layer_norm_backward, dy, x, weight, mean, rstd, dx, dweight, dbias);
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  same_device({&x, &weight, &y, &rstd}, "rms_norm");
  same_shape(x, y, "rms_norm");
  RETORT_CHECK(weight.numel() == x.size(-1), "rms_norm: weight {} does not match the last dim of {}", weight.describe(),
               x.describe());
  row_stats(rstd, x, "rms_norm");
  RETORT_DISPATCH(x.device(), rms_norm_forward, x, weight, eps, y, rstd);
}

void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                       Tensor& dweight) {
  same_device({&dy, &x, &weight, &rstd, &dx, &dweight}, "rms_norm_backward");
  same_shape(dy, x, "rms_norm_backward");
  same_shape(dx, x, "rms_norm_backward");
  RETORT_DISPATCH(x.device(), rms_norm_backward, dy, x, weight, rstd, dx, dweight);
}

namespace {

// x, r, sum and y of a fused residual add + norm: one shape and one dtype.
void check_residual_pair(const Tensor& x, const Tensor& r, const Tensor& sum, const Tensor& y, const char* op) {
  same_shape(x, r, op);
  same_shape(x, sum, op);
  same_shape(x, y, op);
  RETORT_CHECK(r.dtype() == x.dtype() && sum.dtype() == x.dtype() && y.dtype() == x.dtype(),
               "{}: x {}, r {}, sum {} and y {} must share a dtype", op, x.describe(), r.describe(), sum.describe(),
               y.describe());
  floating(x, op);
}

// The norm's weight (and bias) in x's dtype, or f32 / bf16 beside bf16 / f32 activations (both backends compute
// those in float32); an f64 stream needs f64 weights.
void check_norm_weights(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  const auto compatible = [&](const Tensor& w) {
    if (!w.defined() || w.dtype() == x.dtype()) return true;
    const auto float32_class = [](DType d) { return d == DType::F32 || d == DType::BF16; };
    return float32_class(w.dtype()) && float32_class(x.dtype());
  };
  RETORT_CHECK(compatible(weight) && compatible(bias), "{}: weight {} does not fit activations {}", op,
               weight.describe(), x.describe());
}

void check_residual_grads(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& dx, const char* op) {
  same_shape(dy, sum, op);
  same_shape(dx, sum, op);
  RETORT_CHECK(!dsum.defined() || (dsum.shape() == sum.shape() && dsum.dtype() == sum.dtype()),
               "{}: the residual gradient {} does not match the stream {}", op, dsum.describe(), sum.describe());
  RETORT_CHECK(dy.dtype() == sum.dtype() && dx.dtype() == sum.dtype(), "{}: dy {} and dx {} must be in {}", op,
               dy.describe(), dx.describe(), dtype_name(sum.dtype()));
}

}  // namespace

void add_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, float eps,
                            Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  same_device({&x, &r, &weight, &bias, &sum, &y, &mean, &rstd}, "add_layer_norm");
  check_residual_pair(x, r, sum, y, "add_layer_norm");
  RETORT_CHECK(weight.numel() == x.size(-1) && (!bias.defined() || bias.numel() == x.size(-1)),
               "add_layer_norm: weight {} / bias do not match the last dim of {}", weight.describe(), x.describe());
  check_norm_weights(x, weight, bias, "add_layer_norm");
  row_stats(mean, x, "add_layer_norm");
  row_stats(rstd, x, "add_layer_norm");
  RETORT_DISPATCH(x.device(), add_layer_norm_forward, x, r, weight, bias, eps, sum, y, mean, rstd);
}

void add_layer_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                             const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  same_device({&dy, &dsum, &sum, &weight, &mean, &rstd, &dx, &dweight, &dbias}, "add_layer_norm_backward");
  check_residual_grads(dy, dsum, sum, dx, "add_layer_norm_backward");
  check_norm_weights(sum, weight, dbias, "add_layer_norm_backward");
  check_norm_weights(sum, dweight, Tensor(), "add_layer_norm_backward");
  RETORT_DISPATCH(sum.device(), add_layer_norm_backward, dy, dsum, sum, weight, mean, rstd, dx, dweight, dbias);
}

void add_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, float eps, Tensor& sum, Tensor& y,
                          Tensor& rstd) {
  same_device({&x, &r, &weight, &sum, &y, &rstd}, "add_rms_norm");
  check_residual_pair(x, r, sum, y, "add_rms_norm");
  RETORT_CHECK(weight.numel() == x.size(-1), "add_rms_norm: weight {} does not match the last dim of {}",
               weight.describe(), x.describe());
  check_norm_weights(x, weight, Tensor(), "add_rms_norm");
  row_stats(rstd, x, "add_rms_norm");
  RETORT_DISPATCH(x.device(), add_rms_norm_forward, x, r, weight, eps, sum, y, rstd);
}

void add_rms_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  same_device({&dy, &dsum, &sum, &weight, &rstd, &dx, &dweight}, "add_rms_norm_backward");
  check_residual_grads(dy, dsum, sum, dx, "add_rms_norm_backward");
  check_norm_weights(sum, weight, dweight, "add_rms_norm_backward");
  RETORT_DISPATCH(sum.device(), add_rms_norm_backward, dy, dsum, sum, weight, rstd, dx, dweight);
}

void softmax_forward(const Tensor& x, Tensor& y) {
  same_device({&x, &y}, "softmax");
  same_shape(x, y, "softmax");
  floating(x, "softmax");
  RETORT_DISPATCH(x.device(), softmax_forward, x, y);
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  same_device({&y, &dy, &dx}, "softmax_backward");
  same_shape(y, dy, "softmax_backward");
  same_shape(y, dx, "softmax_backward");
  RETORT_DISPATCH(y.device(), softmax_backward, y, dy, dx);
}

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  same_device({&qkv, &out, &probs}, "attention");
  RETORT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, "attention: qkv must be [B, T, 3C], got {}", qkv.describe());
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  RETORT_CHECK(n_head > 0 && C % n_head == 0, "attention: width {} does not divide into {} heads", C, n_head);
  RETORT_CHECK(out.shape() == Shape({B, T, C}), "attention: out {} should be [{}, {}, {}]", out.describe(), B, T, C);
  RETORT_CHECK(probs.shape() == Shape({B, n_head, T, T}), "attention: probs {} should be [{}, {}, {}, {}]",
               probs.describe(), B, n_head, T, T);
  RETORT_DISPATCH(qkv.device(), attention_forward, qkv, n_head, out, probs);
}

void attention_with_cache(const Tensor& qkv, const Tensor& starts, int n_head, Tensor& k_cache, Tensor& v_cache,
                          Tensor& out) {
  same_device({&qkv, &starts, &k_cache, &v_cache, &out}, "attention_with_cache");
  RETORT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, "attention_with_cache: qkv must be [B, T, 3C], got {}",
               qkv.describe());
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  RETORT_CHECK(n_head > 0 && C % n_head == 0, "attention_with_cache: width {} does not divide into {} heads", C,
               n_head);
  RETORT_CHECK(k_cache.ndim() == 4 && k_cache.size(0) == B && k_cache.size(1) == n_head &&
                   k_cache.size(3) == C / n_head && k_cache.dtype() == qkv.dtype(),
               "attention_with_cache: key cache {} should be [{}, {}, capacity, {}] in {}", k_cache.describe(), B,
               n_head, C / n_head, dtype_name(qkv.dtype()));
  same_shape(k_cache, v_cache, "attention_with_cache");
  RETORT_CHECK(v_cache.dtype() == qkv.dtype() && out.dtype() == qkv.dtype() && out.shape() == Shape({B, T, C}),
               "attention_with_cache: value cache {} / out {} do not match qkv {}", v_cache.describe(), out.describe(),
               qkv.describe());
  RETORT_CHECK(starts.dtype() == DType::I32 && starts.numel() == B,
               "attention_with_cache: starts must be i32 [{}], got {}", B, starts.describe());
  RETORT_DISPATCH(qkv.device(), attention_with_cache, qkv, starts, n_head, k_cache, v_cache, out);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  same_device({&dout, &qkv, &probs, &dqkv}, "attention_backward");
  same_shape(qkv, dqkv, "attention_backward");
  RETORT_CHECK(dout.numel() * 3 == qkv.numel(), "attention_backward: dout {} does not match qkv {}", dout.describe(),
               qkv.describe());
  RETORT_DISPATCH(qkv.device(), attention_backward, dout, qkv, probs, n_head, dqkv);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                       Tensor& probs) {
  same_device({&q, &k, &v, &out, &probs}, "attention");
  check_heads(q, k, v, n_head, n_kv_head, "attention");
  const int64_t B = q.size(0), T = q.size(1);
  RETORT_CHECK(out.shape() == q.shape() && out.dtype() == q.dtype(), "attention: out {} should match q {}",
               out.describe(), q.describe());
  RETORT_CHECK(probs.shape() == Shape({B, n_head, T, T}) && probs.dtype() == q.dtype(),
               "attention: probs {} should be [{}, {}, {}, {}] in q's dtype", probs.describe(), B, n_head, T, T);
  RETORT_DISPATCH(q.device(), attention_forward, q, k, v, n_head, n_kv_head, out, probs);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv) {
  same_device({&dout, &q, &k, &v, &probs, &dq, &dk, &dv}, "attention_backward");
  check_heads(q, k, v, n_head, n_kv_head, "attention_backward");
  same_shape(dout, q, "attention_backward");
  same_shape(dq, q, "attention_backward");
  same_shape(dk, k, "attention_backward");
  same_shape(dv, v, "attention_backward");
  RETORT_CHECK(probs.shape() == Shape({q.size(0), n_head, q.size(1), q.size(1)}),
               "attention_backward: probs {} do not match q {}", probs.describe(), q.describe());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dout, &probs, &dq, &dk, &dv})
    RETORT_CHECK(t->dtype() == q.dtype(), "attention_backward: {} is not in q's dtype ({})", t->describe(),
                 dtype_name(q.dtype()));
  RETORT_DISPATCH(q.device(), attention_backward, dout, q, k, v, probs, n_head, n_kv_head, dq, dk, dv);
}

namespace {

// Read on every call (a getenv is nothing next to an attention), so a benchmark can switch paths between runs.
[[maybe_unused]] bool materialized_attention_forced() {
  const char* choice = std::getenv("RETORT_ATTENTION");
  return choice != nullptr && std::string_view(choice) == "materialized";
}

void check_flash(const Tensor& q, const Tensor& out, const Tensor& lse, int n_head, const char* op) {
  RETORT_CHECK(q.device().is_cuda() && q.dtype() == DType::BF16,
               "{}: the fused attention runs on CUDA bf16 tensors, got q {} (use attention_forward / "
               "attention_backward)",
               op, q.describe());
  RETORT_CHECK(out.shape() == Shape({q.size(0), q.size(1), out.size(-1)}) && out.dtype() == q.dtype(),
               "{}: out {} should be [{}, {}, width] in q's dtype", op, out.describe(), q.size(0), q.size(1));
  RETORT_CHECK(lse.shape() == Shape({q.size(0), n_head, q.size(1)}) && lse.dtype() == DType::F32,
               "{}: lse {} should be f32 [{}, {}, {}]", op, lse.describe(), q.size(0), n_head, q.size(1));
}

[[maybe_unused]] void require_fit(bool fits, const Tensor& q, int64_t head_dim, const char* op) {
  RETORT_CHECK(fits,
               "{}: the fused attention takes bf16 with head size 64 or 128 and 16-byte aligned rows, got q {} with "
               "head size {} (check flash_attention_applies first; attention_forward takes any)",
               op, q.describe(), head_dim);
}

}  // namespace

bool flash_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) {
#ifdef RETORT_WITH_CUDA
  if (materialized_attention_forced()) return false;
  return cuda::flash_attention_fits(q, head_dim, {&q, &k, &v});
#else
  (void)q, (void)k, (void)v, (void)head_dim;
  return false;
#endif
}

void flash_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse) {
  same_device({&qkv, &out, &lse}, "flash_attention_forward");
  RETORT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0 && n_head > 0 && qkv.size(2) / 3 % n_head == 0,
               "flash_attention_forward: qkv {} is not [B, T, 3C] with C a multiple of {} heads", qkv.describe(),
               n_head);
  const int64_t C = qkv.size(2) / 3, D = C / n_head;
  check_flash(qkv, out, lse, n_head, "flash_attention_forward");
  RETORT_CHECK(out.size(2) == C, "flash_attention_forward: out {} should have width {}", out.describe(), C);
#ifdef RETORT_WITH_CUDA
  require_fit(cuda::flash_attention_fits(qkv, D, {&qkv, &out}), qkv, D, "flash_attention_forward");
  const ::retort::profile::Range range_("flash_attention_forward", qkv.device());
  cuda::flash_attention_forward(qkv, n_head, out, lse);
#else
  (void)D;
#endif
}

void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                              Tensor& dqkv) {
  same_device({&dout, &qkv, &out, &lse, &dqkv}, "flash_attention_backward");
  same_shape(qkv, dqkv, "flash_attention_backward");
  same_shape(dout, out, "flash_attention_backward");
  RETORT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0 && n_head > 0 && qkv.size(2) / 3 % n_head == 0,
               "flash_attention_backward: qkv {} is not [B, T, 3C] with C a multiple of {} heads", qkv.describe(),
               n_head);
  const int64_t D = qkv.size(2) / 3 / n_head;
  check_flash(qkv, out, lse, n_head, "flash_attention_backward");
  RETORT_CHECK(dout.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype(),
               "flash_attention_backward: dout {} and dqkv {} should be in qkv's dtype", dout.describe(),
               dqkv.describe());
#ifdef RETORT_WITH_CUDA
  require_fit(cuda::flash_attention_fits(qkv, D, {&qkv, &out, &dqkv}), qkv, D, "flash_attention_backward");
  const ::retort::profile::Range range_("flash_attention_backward", qkv.device());
  cuda::flash_attention_backward(dout, qkv, out, lse, n_head, dqkv);
#else
  (void)D;
#endif
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                             Tensor& lse) {
  same_device({&q, &k, &v, &out, &lse}, "flash_attention_forward");
  const int64_t D = check_heads(q, k, v, n_head, n_kv_head, "flash_attention_forward");
  check_flash(q, out, lse, n_head, "flash_attention_forward");
  same_shape(out, q, "flash_attention_forward");
#ifdef RETORT_WITH_CUDA
  require_fit(cuda::flash_attention_fits(q, D, {&q, &k, &v, &out}), q, D, "flash_attention_forward");
  const ::retort::profile::Range range_("flash_attention_forward", q.device());
  cuda::flash_attention_forward(q, k, v, n_head, n_kv_head, out, lse);
#else
  (void)D;
#endif
}

void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv) {
  same_device({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}, "flash_attention_backward");
  const int64_t D = check_heads(q, k, v, n_head, n_kv_head, "flash_attention_backward");
  check_flash(q, out, lse, n_head, "flash_attention_backward");
  same_shape(dout, q, "flash_attention_backward");
  same_shape(out, q, "flash_attention_backward");
  same_shape(dq, q, "flash_attention_backward");
  same_shape(dk, k, "flash_attention_backward");
  same_shape(dv, v, "flash_attention_backward");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dout, &dq, &dk, &dv})
    RETORT_CHECK(t->dtype() == q.dtype(), "flash_attention_backward: {} is not in q's dtype ({})", t->describe(),
                 dtype_name(q.dtype()));
#ifdef RETORT_WITH_CUDA
  require_fit(cuda::flash_attention_fits(q, D, {&q, &k, &v, &out, &dq, &dk, &dv}), q, D, "flash_attention_backward");
  const ::retort::profile::Range range_("flash_attention_backward", q.device());
  cuda::flash_attention_backward(dout, q, k, v, out, lse, n_head, n_kv_head, dq, dk, dv);
#else
  (void)D;
#endif
}

void attention_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& starts, int n_head,
                          int n_kv_head, Tensor& k_cache, Tensor& v_cache, Tensor& out) {
  same_device({&q, &k, &v, &starts, &k_cache, &v_cache, &out}, "attention_with_cache");
  const int64_t D = check_heads(q, k, v, n_head, n_kv_head, "attention_with_cache");
  const int64_t B = q.size(0);
  RETORT_CHECK(k_cache.ndim() == 4 && k_cache.size(0) == B && k_cache.size(1) == n_kv_head && k_cache.size(3) == D &&
                   k_cache.dtype() == q.dtype(),
               "attention_with_cache: key cache {} should be [{}, {}, capacity, {}] in {}", k_cache.describe(), B,
               n_kv_head, D, dtype_name(q.dtype()));
  same_shape(k_cache, v_cache, "attention_with_cache");
  RETORT_CHECK(v_cache.dtype() == q.dtype() && out.dtype() == q.dtype() && out.shape() == q.shape(),
               "attention_with_cache: value cache {} / out {} do not match q {}", v_cache.describe(), out.describe(),
               q.describe());
  RETORT_CHECK(starts.dtype() == DType::I32 && starts.numel() == B,
               "attention_with_cache: starts must be i32 [{}], got {}", B, starts.describe());
  RETORT_DISPATCH(q.device(), attention_with_cache, q, k, v, starts, n_head, n_kv_head, k_cache, v_cache, out);
}

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out) {
  embedding_forward(table, ids, 0, table.size(0), out);
}

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable) {
  embedding_backward(dout, ids, 0, dtable.size(0), dtable);
}

void embedding_forward(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& out) {
  same_device({&table, &ids, &out}, "embedding");
  RETORT_CHECK(row_start >= 0 && row_start + table.size(0) <= id_limit,
               "embedding: rows [{}, {}) are not inside the id range [0, {})", row_start, row_start + table.size(0),
               id_limit);
  RETORT_CHECK(table.ndim() == 2 && ids.dtype() == DType::I32, "embedding: table {} / ids {} invalid", table.describe(),
               ids.describe());
  RETORT_CHECK(out.numel() == ids.numel() * table.size(1) && out.dtype() == table.dtype(),
               "embedding: out {} does not fit {} ids of width {}", out.describe(), ids.numel(), table.size(1));
  RETORT_DISPATCH(table.device(), embedding_forward, table, ids, row_start, id_limit, out);
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& dtable) {
  same_device({&dout, &ids, &dtable}, "embedding_backward");
  RETORT_CHECK(row_start >= 0 && row_start + dtable.size(0) <= id_limit,
               "embedding_backward: rows [{}, {}) are not inside the id range [0, {})", row_start,
               row_start + dtable.size(0), id_limit);
  RETORT_CHECK(dout.numel() == ids.numel() * dtable.size(1), "embedding_backward: dout {} does not fit {} ids",
               dout.describe(), ids.numel());
  RETORT_DISPATCH(dtable.device(), embedding_backward, dout, ids, row_start, id_limit, dtable);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int ignore_index, Tensor& row_loss,
                           Tensor& lse) {
  same_device({&logits, &targets, &row_loss, &lse}, "cross_entropy");
  RETORT_CHECK(logits.ndim() == 2 && targets.dtype() == DType::I32 && targets.numel() == logits.size(0),
               "cross_entropy: logits {} must be [N, V] and targets {} i32 [N]", logits.describe(), targets.describe());
  row_stats(row_loss, logits, "cross_entropy");
  row_stats(lse, logits, "cross_entropy");
  RETORT_DISPATCH(logits.device(), cross_entropy_forward, logits, targets, ignore_index, row_loss, lse);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int ignore_index,
                            float grad_scale, Tensor& dlogits) {
  same_device({&logits, &targets, &lse, &dlogits}, "cross_entropy_backward");
  same_shape(logits, dlogits, "cross_entropy_backward");
  RETORT_DISPATCH(logits.device(), cross_entropy_backward, logits, targets, lse, ignore_index, grad_scale, dlogits);
}

void topk(const Tensor& x, int64_t index_base, const Tensor& ids, Tensor& values, Tensor& indices, Tensor& row_lse) {
  same_device({&x, &ids, &values, &indices, &row_lse}, "topk");
  RETORT_CHECK(x.ndim() >= 1 && values.ndim() >= 1, "topk: x {} and values {} need a last dimension", x.describe(),
               values.describe());
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols, k = values.size(-1);
  RETORT_INPUT_CHECK(k >= 1 && k <= cols, "topk: k = {} must lie in [1, {}] (the width of {}); ask for fewer values", k,
                     cols, x.describe());
  RETORT_CHECK(values.dtype() == DType::F32 && values.numel() == rows * k,
               "topk: values {} must be f32 [{}, {}] for input {}", values.describe(), rows, k, x.describe());
  RETORT_CHECK(indices.dtype() == DType::I32 && indices.numel() == rows * k,
               "topk: indices {} must be i32 [{}, {}] for input {}", indices.describe(), rows, k, x.describe());
  RETORT_CHECK(!ids.defined() || (ids.dtype() == DType::I32 && ids.numel() == x.numel()),
               "topk: ids {} must be i32 with the shape of {}", ids.describe(), x.describe());
  RETORT_CHECK(!row_lse.defined() || (row_lse.dtype() == DType::F32 && row_lse.numel() == rows),
               "topk: row_lse {} must be f32 [{}]", row_lse.describe(), rows);
  RETORT_CHECK(index_base >= 0 && index_base + cols <= INT32_MAX, "topk: ids [{}, {}) do not fit int32", index_base,
               index_base + cols);
  floating(x, "topk");
  if (rows == 0) return;
  RETORT_DISPATCH(x.device(), topk, x, index_base, ids, values, indices, row_lse);
}

}  // namespace retort::kernels
