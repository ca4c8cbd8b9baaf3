#include "core/ops/ops.h"

#include <cmath>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/kernels/kernels.h"
#include "core/ops/fusion.h"
#include "core/util/error.h"

namespace retort::ops {

namespace {

Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype(), t.device());
}
Tensor zeros_like(const Tensor& t) {
  return Tensor::zeros(t.shape(), t.dtype(), t.device());
}
// Per-row statistics are kept in f32, or f64 when the op runs in f64 (reference checks).
DType stat_dtype(const Tensor& t) {
  return t.dtype() == DType::F64 ? DType::F64 : DType::F32;
}
Tensor row_stat(const Tensor& x) {
  const int64_t rows = x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
  return Tensor::empty({rows}, stat_dtype(x), x.device());
}
Tensor scalar_result(const Tensor& x) {
  return Tensor::empty({}, stat_dtype(x), x.device());
}

// The user-facing checks of the attention ops (head counts come from a model's configuration).
void check_attention_heads(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head,
                           const char* op) {
  RETORT_INPUT_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
                     "{}: {} query heads cannot share {} key/value heads: n_head must be a positive multiple of "
                     "n_kv_head",
                     op, n_head, n_kv_head);
  RETORT_INPUT_CHECK(q.ndim() == 3 && q.size(2) % n_head == 0,
                     "{}: q {} must be [B, T, n_head * head_dim] with n_head = {}: check the model's widths", op,
                     q.describe(), n_head);
  const int64_t D = q.size(2) / n_head;
  RETORT_INPUT_CHECK(k.ndim() == 3 && v.ndim() == 3 && k.shape() == v.shape() && k.size(0) == q.size(0) &&
                         k.size(1) == q.size(1) && k.size(2) == n_kv_head * D,
                     "{}: k {} and v {} must be [{}, {}, {}] (n_kv_head {} x head_dim {}): check the key/value "
                     "projections' widths",
                     op, k.describe(), v.describe(), q.size(0), q.size(1), n_kv_head * D, n_kv_head, D);
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = x.view(shape);
  const Shape original = x.shape();
  return autograd::record(out, "reshape", {x},
                          [original](const Tensor& g) { return std::vector<Tensor>{g.view(original)}; });
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  kernels::cast(x, out);
  const DType original = x.dtype();
  return autograd::record(out, "cast", {x},
                          [original](const Tensor& g) { return std::vector<Tensor>{g.to(original)}; });
}

Tensor add(const Tensor& a, const Tensor& b) {
  RETORT_CHECK(a.shape() == b.shape(), "add: shapes differ ({} vs {})", a.describe(), b.describe());
  Tensor out = empty_like(a);
  kernels::add(a, b, out, 1.0f, 1.0f);
  return autograd::record(out, "add", {a, b}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  RETORT_CHECK(a.shape() == b.shape(), "sub: shapes differ ({} vs {})", a.describe(), b.describe());
  Tensor out = empty_like(a);
  kernels::add(a, b, out, 1.0f, -1.0f);
  return autograd::record(out, "sub", {a, b}, [](const Tensor& g) {
    Tensor neg = empty_like(g);
    kernels::scale(g, -1.0f, neg);
    return std::vector<Tensor>{g, neg};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = empty_like(a);
  kernels::mul(a, b, out);
  return autograd::record(out, "mul", {a, b}, [a, b](const Tensor& g) {
    Tensor ga, gb;
    if (a.requires_grad()) {
      ga = empty_like(a);
      kernels::mul(g, b, ga);
    }
    if (b.requires_grad()) {
      gb = empty_like(b);
      kernels::mul(g, a, gb);
    }
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor scale(const Tensor& x, double s) {
  Tensor out = empty_like(x);
  kernels::scale(x, static_cast<float>(s), out);
  return autograd::record(out, "scale", {x}, [s](const Tensor& g) {
    Tensor gx = empty_like(g);
    kernels::scale(g, static_cast<float>(s), gx);
    return std::vector<Tensor>{gx};
  });
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  Tensor out = empty_like(x);
  kernels::add_bias(x, bias, out);
  return autograd::record(out, "add_bias", {x, bias}, [bias](const Tensor& g) {
    Tensor gb;
    if (bias.requires_grad()) {
      gb = empty_like(bias);
      kernels::sum_rows(g, gb, 0.0f);
    }
    return std::vector<Tensor>{g, gb};
  });
}

Tensor gelu(const Tensor& x) {
  Tensor out = empty_like(x);
  kernels::gelu_forward(x, out);
  return autograd::record(out, "gelu", {x}, [x](const Tensor& g) {
    Tensor gx = empty_like(x);
    kernels::gelu_backward(x, g, gx);
    return std::vector<Tensor>{gx};
  });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  RETORT_CHECK(gate.shape() == up.shape(), "swiglu: shapes differ ({} vs {})", gate.describe(), up.describe());
  Tensor out = empty_like(gate);
  kernels::swiglu_forward(gate, up, out);
  return autograd::record(out, "swiglu", {gate, up}, [gate, up](const Tensor& g) {
    Tensor dgate = empty_like(gate), dup = empty_like(up);
    kernels::swiglu_backward(gate, up, g, dgate, dup);
    return std::vector<Tensor>{dgate, dup};
  });
}

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim) {
  RETORT_INPUT_CHECK(head_dim > 0 && head_dim % 2 == 0 && x.ndim() == 3 && x.size(2) % head_dim == 0,
                     "rotary_embedding: head_dim {} must be even and divide the width of x {} (heads * head_dim)",
                     head_dim, x.describe());
  Tensor out = empty_like(x);
  kernels::rotary_embedding(x, positions, inv_freq, head_dim, false, out);
  return autograd::record(out, "rotary_embedding", {x}, [positions, inv_freq, head_dim](const Tensor& g) {
    Tensor gx = empty_like(g);
    kernels::rotary_embedding(g, positions, inv_freq, head_dim, true, gx);
    return std::vector<Tensor>{gx};
  });
}

Tensor sum(const Tensor& x) {
  Tensor out = scalar_result(x);
  kernels::sum(x, out);
  return autograd::record(out, "sum", {x}, [x](const Tensor& g) {
    return std::vector<Tensor>{Tensor::full(x.shape(), g.item(), x.dtype(), x.device())};
  });
}

Tensor mean(const Tensor& x) {
  return scale(sum(x), 1.0 / std::max<int64_t>(x.numel(), 1));
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  RETORT_CHECK(a.ndim() >= 2 && b.ndim() >= 2, "matmul: operands must be at least 2-D ({}, {})", a.describe(),
               b.describe());
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  Shape out_shape = a.ndim() >= b.ndim() ? a.shape() : b.shape();
  out_shape[out_shape.size() - 2] = m;
  out_shape[out_shape.size() - 1] = n;
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  kernels::gemm(a, b, out, trans_a, trans_b, 1.0f, 0.0f);
  return autograd::record(out, "matmul", {a, b}, [a, b, trans_a, trans_b](const Tensor& g) {
    Tensor ga, gb;
    if (a.requires_grad()) {
      // C = op(A) op(B): dop(A) = G op(B)^T, and dA is its transpose when A entered transposed.
      ga = empty_like(a);
      if (a.ndim() == 2 && g.ndim() > 2) {
        // A shared across the batch: its gradient sums over the batch, i.e. one GEMM over stacked rows.
        Tensor g2 = g.view({-1, g.size(-1)});
        RETORT_CHECK(b.ndim() == 2, "matmul: batched gradient with a shared left operand needs a 2-D right operand");
        if (!trans_a)
          kernels::gemm(g2, b, ga, false, !trans_b, 1.0f, 0.0f);
        else
          kernels::gemm(b, g2, ga, trans_b, true, 1.0f, 0.0f);
      } else if (!trans_a) {
        kernels::gemm(g, b, ga, false, !trans_b, 1.0f, 0.0f);
      } else {
        kernels::gemm(b, g, ga, trans_b, true, 1.0f, 0.0f);
      }
    }
    if (b.requires_grad()) {
      gb = empty_like(b);
      if (b.ndim() == 2 && g.ndim() > 2) {
        // B shared across the batch: fold the batch into the rows of A and G.
        Tensor g2 = g.view({-1, g.size(-1)});
        RETORT_CHECK(!trans_a, "matmul: a shared right operand needs a non-transposed left operand");
        Tensor a2 = a.view({-1, a.size(-1)});
        if (!trans_b)
          kernels::gemm(a2, g2, gb, true, false, 1.0f, 0.0f);
        else
          kernels::gemm(g2, a2, gb, true, false, 1.0f, 0.0f);
      } else if (!trans_b) {
        kernels::gemm(a, g, gb, !trans_a, false, 1.0f, 0.0f);
      } else {
        kernels::gemm(g, a, gb, true, trans_a, 1.0f, 0.0f);
      }
    }
    return std::vector<Tensor>{ga, gb};
  });
}

namespace {

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  RETORT_CHECK(weight.ndim() == 2 && x.ndim() >= 1 && x.size(-1) == weight.size(1),
               "{}: input {} does not match weight {} ([out, in])", op, x.describe(), weight.describe());
  RETORT_CHECK(!bias.defined() || bias.numel() == weight.size(0), "{}: bias {} does not match weight {}", op,
               bias.describe(), weight.describe());
}

// dW = g^T x and db = g summed over rows, for whichever of weight and bias needs a gradient.
void linear_parameter_grads(const Tensor& g2, const Tensor& x2, const Tensor& weight, const Tensor& bias, Tensor& gw,
                            Tensor& gb) {
  const bool want_w = weight.requires_grad(), want_b = bias.defined() && bias.requires_grad();
  if (want_w) gw = empty_like(weight);
  if (want_b) gb = empty_like(bias);
  // One product for both where the dtypes allow (the epilogue writes the bias gradient in the product's dtype).
  const bool one_dtype =
      x2.dtype() == g2.dtype() && weight.dtype() == g2.dtype() && (!want_b || bias.dtype() == g2.dtype());
  if (want_w && one_dtype && fused_kernels_enabled()) {
    kernels::linear_weight_grad(g2, x2, gw, gb);
    return;
  }
  if (want_w) kernels::gemm(g2, x2, gw, true, false, 1.0f, 0.0f);
  if (want_b) kernels::sum_rows(g2, gb, 0.0f);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias, "linear");
  const int64_t in = weight.size(1), out_features = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor x2 = x.view({-1, in});
  Tensor out2 = out.view({-1, out_features});
  if (bias.defined() && fused_kernels_enabled() && bias.dtype() == x.dtype() && weight.dtype() == x.dtype()) {
    Tensor no_aux;
    kernels::linear_forward(x2, weight, bias, out2, no_aux);
  } else {
    kernels::gemm(x2, weight, out2, false, true, 1.0f, 0.0f);
    if (bias.defined()) kernels::add_bias(out2, bias, out2);
  }
  return autograd::record(out, "linear", {x, weight, bias}, [x2, weight, bias, x_shape = x.shape()](const Tensor& g) {
    Tensor g2 = g.view({-1, weight.size(0)});
    Tensor gx = Tensor::empty(x2.shape(), x2.dtype(), x2.device());
    kernels::gemm(g2, weight, gx, false, false, 1.0f, 0.0f);
    Tensor gw, gb;
    linear_parameter_grads(g2, x2, weight, bias, gw, gb);
    return std::vector<Tensor>{gx.view(x_shape), gw, gb};
  });
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias, "linear_gelu");
  RETORT_CHECK(weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
               "linear_gelu: weight {} and bias must be in the dtype of x {}", weight.describe(), x.describe());
  if (!fused_kernels_enabled()) return gelu(linear(x, weight, bias));
  const int64_t in = weight.size(1), out_features = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor x2 = x.view({-1, in});
  Tensor out2 = out.view({-1, out_features});
  if (!autograd::needs_grad({x, weight, bias})) {
    // Nothing will ask for the backward: the GELU's input is neither kept nor written.
    kernels::linear_gelu_forward(x2, weight, bias, out2);
    return out;
  }
  Tensor pre = Tensor::empty({x.numel() / std::max<int64_t>(in, 1), out_features}, x.dtype(), x.device());
  kernels::linear_forward(x2, weight, bias, out2, pre);
  return autograd::record(out, "linear_gelu", {x, weight, bias},
                          [x2, weight, bias, pre, x_shape = x.shape()](const Tensor& g) {
                            Tensor g2 = g.view({-1, weight.size(0)});
                            // The gradient at the GELU input, then the linear layer's three gradients from it.
                            Tensor dpre = empty_like(pre);
                            kernels::gelu_backward(pre, g2, dpre);
                            Tensor gx = Tensor::empty(x2.shape(), x2.dtype(), x2.device());
                            kernels::gemm(dpre, weight, gx, false, false, 1.0f, 0.0f);
                            Tensor gw, gb;
                            linear_parameter_grads(dpre, x2, weight, bias, gw, gb);
                            return std::vector<Tensor>{gx.view(x_shape), gw, gb};
                          });
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor y = empty_like(x), mean_stat = row_stat(x), rstd = row_stat(x);
  kernels::layer_norm_forward(x, weight, bias, static_cast<float>(eps), y, mean_stat, rstd);
  return autograd::record(y, "layer_norm", {x, weight, bias}, [x, weight, bias, mean_stat, rstd](const Tensor& g) {
    Tensor gx = empty_like(x);
    Tensor gw = weight.requires_grad() ? zeros_like(weight) : Tensor();
    Tensor gb = bias.defined() && bias.requires_grad() ? zeros_like(bias) : Tensor();
    kernels::layer_norm_backward(g, x, weight, mean_stat, rstd, gx, gw, gb);
    return std::vector<Tensor>{gx, gw, gb};
  });
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = empty_like(x), rstd = row_stat(x);
  kernels::rms_norm_forward(x, weight, static_cast<float>(eps), y, rstd);
  return autograd::record(y, "rms_norm", {x, weight}, [x, weight, rstd](const Tensor& g) {
    Tensor gx = empty_like(x);
    Tensor gw = weight.requires_grad() ? zeros_like(weight) : Tensor();
    kernels::rms_norm_backward(g, x, weight, rstd, gx, gw);
    return std::vector<Tensor>{gx, gw};
  });
}

namespace {

void check_residual_inputs(const Tensor& x, const Tensor& r, const char* op) {
  RETORT_CHECK(x.shape() == r.shape() && x.dtype() == r.dtype(),
               "{}: the stream {} and the residual {} must have one shape and dtype", op, x.describe(), r.describe());
}

// The stream's node: sum = x + r hands its gradient to both. Its gradient from the norm is added to the rest
// inside the norm's backward kernel (record_folding), so by the time this node runs it is complete.
Tensor record_residual_sum(const Tensor& sum, const Tensor& x, const Tensor& r, const char* name) {
  return autograd::record(sum, name, {x, r}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
}

}  // namespace

ResidualNorm add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps) {
  check_residual_inputs(x, r, "add_layer_norm");
  if (!fused_kernels_enabled()) {
    Tensor sum = add(x, r);
    return {sum, layer_norm(sum, weight, bias, eps)};
  }
  Tensor sum = empty_like(x), y = empty_like(x), mean_stat = row_stat(x), rstd = row_stat(x);
  kernels::add_layer_norm_forward(x, r, weight, bias, static_cast<float>(eps), sum, y, mean_stat, rstd);
  sum = record_residual_sum(sum, x, r, "add_layer_norm.sum");
  const Tensor stored = sum.detach();
  y = autograd::record_folding(y, "add_layer_norm", {sum, weight, bias}, 0,
                               [stored, weight, bias, mean_stat, rstd](const Tensor& g, const Tensor& gathered) {
                                 Tensor gx = empty_like(stored);
                                 Tensor gw = weight.requires_grad() ? zeros_like(weight) : Tensor();
                                 Tensor gb = bias.defined() && bias.requires_grad() ? zeros_like(bias) : Tensor();
                                 kernels::add_layer_norm_backward(g, gathered, stored, weight, mean_stat, rstd, gx, gw,
                                                                  gb);
                                 return std::vector<Tensor>{gx, gw, gb};
                               });
  return {sum, y};
}

ResidualNorm add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps) {
  check_residual_inputs(x, r, "add_rms_norm");
  if (!fused_kernels_enabled()) {
    Tensor sum = add(x, r);
    return {sum, rms_norm(sum, weight, eps)};
  }
  Tensor sum = empty_like(x), y = empty_like(x), rstd = row_stat(x);
  kernels::add_rms_norm_forward(x, r, weight, static_cast<float>(eps), sum, y, rstd);
  sum = record_residual_sum(sum, x, r, "add_rms_norm.sum");
  const Tensor stored = sum.detach();
  y = autograd::record_folding(y, "add_rms_norm", {sum, weight}, 0,
                               [stored, weight, rstd](const Tensor& g, const Tensor& gathered) {
                                 Tensor gx = empty_like(stored);
                                 Tensor gw = weight.requires_grad() ? zeros_like(weight) : Tensor();
                                 kernels::add_rms_norm_backward(g, gathered, stored, weight, rstd, gx, gw);
                                 return std::vector<Tensor>{gx, gw};
                               });
  return {sum, y};
}

Tensor softmax(const Tensor& x) {
  Tensor y = empty_like(x);
  kernels::softmax_forward(x, y);
  // The closure keeps y's storage through a detached handle: capturing y itself would be a cycle.
  Tensor saved = y.detach();
  return autograd::record(y, "softmax", {x}, [saved](const Tensor& g) {
    Tensor gx = empty_like(saved);
    kernels::softmax_backward(saved, g, gx);
    return std::vector<Tensor>{gx};
  });
}

Tensor causal_self_attention(const Tensor& qkv, int n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  Tensor out = Tensor::empty({B, T, C}, qkv.dtype(), qkv.device());
  if (n_head > 0 && C % n_head == 0 && kernels::flash_attention_applies(qkv, qkv, qkv, C / n_head)) {
    // Fused: the backward recomputes the probabilities from the row log-sum-exps (f32 [B, H, T]) and the output.
    Tensor lse = Tensor::empty({B, n_head, T}, DType::F32, qkv.device());
    kernels::flash_attention_forward(qkv, n_head, out, lse);
    // A detached handle on out: capturing out itself would be a cycle through its own grad node.
    Tensor saved_out = out.detach();
    return autograd::record(out, "causal_self_attention", {qkv}, [qkv, saved_out, lse, n_head](const Tensor& g) {
      Tensor gqkv = empty_like(qkv);
      kernels::flash_attention_backward(g, qkv, saved_out, lse, n_head, gqkv);
      return std::vector<Tensor>{gqkv};
    });
  }
  Tensor probs = Tensor::empty({B, n_head, T, T}, qkv.dtype(), qkv.device());
  kernels::attention_forward(qkv, n_head, out, probs);
  return autograd::record(out, "causal_self_attention", {qkv}, [qkv, probs, n_head](const Tensor& g) {
    Tensor gqkv = empty_like(qkv);
    kernels::attention_backward(g, qkv, probs, n_head, gqkv);
    return std::vector<Tensor>{gqkv};
  });
}

Tensor attention_with_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, const Tensor& starts, int n_head) {
  RETORT_INPUT_CHECK(!(grad_enabled() && qkv.requires_grad()),
                     "attention_with_kv_cache is inference only: call it under NoGradGuard (it records no backward)");
  RETORT_INPUT_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, "attention_with_kv_cache: qkv must be [B, T, 3C], got {}",
                     qkv.describe());
  Tensor out = Tensor::empty({qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(), qkv.device());
  kernels::attention_with_cache(qkv, starts, n_head, k_cache, v_cache, out);
  return out;
}

namespace {

// Host start positions, checked against the rows of `x` and the cache's capacity, as an i32 tensor on x's device.
Tensor checked_starts(const std::vector<int64_t>& starts, const Tensor& x, const Tensor& k_cache, const char* what) {
  RETORT_INPUT_CHECK(x.ndim() == 3 && static_cast<int64_t>(starts.size()) == x.size(0),
                     "attention_with_kv_cache: {} start positions for {} {}: give one per row", starts.size(), what,
                     x.describe());
  const int64_t capacity = k_cache.ndim() == 4 ? k_cache.size(2) : 0;
  for (size_t b = 0; b < starts.size(); ++b)
    RETORT_INPUT_CHECK(starts[b] >= 0 && starts[b] <= capacity,
                       "attention_with_kv_cache: row {} starts at {}, outside a cache of {} positions", b, starts[b],
                       capacity);
  std::vector<int32_t> positions(starts.begin(), starts.end());
  return Tensor::from_ints(positions, {x.size(0)}, x.device());
}

}  // namespace

Tensor attention_with_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& starts,
                               int n_head) {
  return attention_with_kv_cache(qkv, k_cache, v_cache, checked_starts(starts, qkv, k_cache, "qkv"), n_head);
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  check_attention_heads(q, k, v, n_head, n_kv_head, "causal_attention");
  const int64_t B = q.size(0), T = q.size(1);
  Tensor out = empty_like(q);
  if (kernels::flash_attention_applies(q, k, v, q.size(2) / n_head)) {
    Tensor lse = Tensor::empty({B, n_head, T}, DType::F32, q.device());
    kernels::flash_attention_forward(q, k, v, n_head, n_kv_head, out, lse);
    Tensor saved_out = out.detach();  // not out itself: a cycle through its own grad node
    return autograd::record(
        out, "causal_attention", {q, k, v}, [q, k, v, saved_out, lse, n_head, n_kv_head](const Tensor& g) {
          Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v);
          kernels::flash_attention_backward(g, q, k, v, saved_out, lse, n_head, n_kv_head, dq, dk, dv);
          return std::vector<Tensor>{dq, dk, dv};
        });
  }
  Tensor probs = Tensor::empty({B, n_head, T, T}, q.dtype(), q.device());
  kernels::attention_forward(q, k, v, n_head, n_kv_head, out, probs);
  return autograd::record(out, "causal_attention", {q, k, v}, [q, k, v, probs, n_head, n_kv_head](const Tensor& g) {
    Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v);
    kernels::attention_backward(g, q, k, v, probs, n_head, n_kv_head, dq, dk, dv);
    return std::vector<Tensor>{dq, dk, dv};
  });
}

Tensor attention_with_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                               const Tensor& starts, int n_head, int n_kv_head) {
  RETORT_INPUT_CHECK(!(grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())),
                     "attention_with_kv_cache is inference only: call it under NoGradGuard (it records no backward)");
  check_attention_heads(q, k, v, n_head, n_kv_head, "attention_with_kv_cache");
  Tensor out = empty_like(q);
  kernels::attention_with_cache(q, k, v, starts, n_head, n_kv_head, k_cache, v_cache, out);
  return out;
}

Tensor attention_with_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                               const std::vector<int64_t>& starts, int n_head, int n_kv_head) {
  return attention_with_kv_cache(q, k, v, k_cache, v_cache, checked_starts(starts, q, k_cache, "q"), n_head, n_kv_head);
}

Tensor embedding(const Tensor& table, const Tensor& ids) {
  Shape out_shape = ids.shape();
  out_shape.push_back(table.size(1));
  Tensor out = Tensor::empty(out_shape, table.dtype(), table.device());
  kernels::embedding_forward(table, ids, out);
  return autograd::record(out, "embedding", {table}, [table, ids](const Tensor& g) {
    Tensor gt = zeros_like(table);
    kernels::embedding_backward(g, ids, gt);
    return std::vector<Tensor>{gt};
  });
}

Tensor embedding_shard(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit) {
  Shape out_shape = ids.shape();
  out_shape.push_back(table.size(1));
  Tensor out = Tensor::empty(out_shape, table.dtype(), table.device());
  kernels::embedding_forward(table, ids, row_start, id_limit, out);
  return autograd::record(out, "embedding_shard", {table}, [table, ids, row_start, id_limit](const Tensor& g) {
    Tensor gt = zeros_like(table);
    kernels::embedding_backward(g, ids, row_start, id_limit, gt);
    return std::vector<Tensor>{gt};
  });
}

}  // namespace retort::ops
