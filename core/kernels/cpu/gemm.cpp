#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void gemm(const Tensor& a_in, const Tensor& b_in, Tensor& c_in, bool trans_a, bool trans_b, float alpha, float beta) {
  Tensor a = widen(a_in), b = widen(b_in);
  OutputSlot slot(c_in, /*keep_contents=*/beta != 0.0f);
  Tensor& c = slot.get();
  const int64_t m = c.size(-2), n = c.size(-1);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t batch = c.numel() / std::max<int64_t>(m * n, 1);
  const int64_t a_stride = a.ndim() == 2 ? 0 : m * k;
  const int64_t b_stride = b.ndim() == 2 ? 0 : k * n;
  dispatch_real(c.dtype(), [&]<typename T>() {
    // Many small batched products (attention heads) go in parallel; one large product lets Eigen thread.
    auto one = [&](int64_t i) {
      ConstMatrixMap<T> ma(a.data<T>() + i * a_stride, trans_a ? k : m, trans_a ? m : k);
      ConstMatrixMap<T> mb(b.data<T>() + i * b_stride, trans_b ? n : k, trans_b ? k : n);
      MatrixMap<T> mc(c.data<T>() + i * m * n, m, n);
      if (beta == 0.0f) {
        if (!trans_a && !trans_b) mc.noalias() = T(alpha) * (ma * mb);
        if (!trans_a && trans_b) mc.noalias() = T(alpha) * (ma * mb.transpose());
        if (trans_a && !trans_b) mc.noalias() = T(alpha) * (ma.transpose() * mb);
        if (trans_a && trans_b) mc.noalias() = T(alpha) * (ma.transpose() * mb.transpose());
      } else {
        mc *= T(beta);
        if (!trans_a && !trans_b) mc.noalias() += T(alpha) * (ma * mb);
        if (!trans_a && trans_b) mc.noalias() += T(alpha) * (ma * mb.transpose());
        if (trans_a && !trans_b) mc.noalias() += T(alpha) * (ma.transpose() * mb);
        if (trans_a && trans_b) mc.noalias() += T(alpha) * (ma.transpose() * mb.transpose());
      }
    };
    if (batch > 1 && m * n * k < (1 << 21)) {
      Eigen::setNbThreads(1);
#pragma omp parallel for if (batch * m * n * k > 32768)
      for (int64_t i = 0; i < batch; ++i) one(i);
      Eigen::setNbThreads(0);
    } else {
      for (int64_t i = 0; i < batch; ++i) one(i);
    }
  });
  slot.finish();
}

// The CPU is the reference for the GPU's fused epilogues: the same math through the plain kernels, each result
// rounded to the storage dtype as those kernels round it.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor& pre_gelu) {
  Tensor& product = pre_gelu.defined() ? pre_gelu : out;
  gemm(x, weight, product, false, true, 1.0f, 0.0f);
  if (bias.defined()) add_bias(product, bias, product);
  if (pre_gelu.defined()) gelu_forward(pre_gelu, out);
}

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  Tensor pre = Tensor::empty(out.shape(), out.dtype(), out.device());
  linear_forward(x, weight, bias, out, pre);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dweight, Tensor& dbias) {
  gemm(dy, x, dweight, true, false, 1.0f, 0.0f);
  if (dbias.defined()) sum_rows(dy, dbias, 0.0f);
}

}  // namespace retort::kernels::cpu
