// Causal attention on the CPU, with grouped-query heads: query head h reads key/value head h / g (g = n_head /
// n_kv_head). The packed-qkv entry points and the separate q, k, v ones are the same code: q, k and v are read
// through row strides (3C inside a packed [B, T, 3C] tensor, their own width otherwise).
#include <cmath>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {

// Where one batch's q, k, v (or their gradients) live: base pointers of head 0 at position 0, and row strides.
template <typename P>
struct Operands {
  P q, k, v;
  int64_t q_stride, kv_stride;
};

// One (batch, head) pair at a time: S = Q K^T / sqrt(D), P = softmax(S masked), O = P V.
template <typename T>
void forward(Operands<const T*> in, int64_t B, int64_t Tn, int64_t n_head, int64_t n_kv_head, int64_t D, T* out,
             T* probs) {
  const int64_t C = n_head * D, group = n_head / n_kv_head;
  const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
  Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * Tn * D > 32768)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / group;
      ConstStridedMatrixMap<T> q(in.q + b * Tn * in.q_stride + h * D, Tn, D, Eigen::OuterStride<>(in.q_stride));
      ConstStridedMatrixMap<T> k(in.k + b * Tn * in.kv_stride + kvh * D, Tn, D, Eigen::OuterStride<>(in.kv_stride));
      ConstStridedMatrixMap<T> v(in.v + b * Tn * in.kv_stride + kvh * D, Tn, D, Eigen::OuterStride<>(in.kv_stride));
      MatrixMap<T> p(probs + (b * n_head + h) * Tn * Tn, Tn, Tn);
      p.noalias() = scale * (q * k.transpose());
      // Row i attends to positions 0..i: softmax over those, exact zeros above the diagonal.
      for (int64_t i = 0; i < Tn; ++i) {
        softmax_row(p.row(i).data(), p.row(i).data(), i + 1);
        std::fill(p.row(i).data() + i + 1, p.row(i).data() + Tn, T(0));
      }
      StridedMatrixMap<T> o(out + b * Tn * C + h * D, Tn, D, Eigen::OuterStride<>(C));
      o.noalias() = p * v;
    }
  }
  Eigen::setNbThreads(0);
}

// One (batch, key/value head) pair per task, so that the query heads of a group add their key and value
// gradients into the same rows without races; the first head of a group assigns, the others add.
template <typename T>
void backward(const T* dout, Operands<const T*> in, const T* probs, int64_t B, int64_t Tn, int64_t n_head,
              int64_t n_kv_head, int64_t D, Operands<T*> grad) {
  const int64_t C = n_head * D, group = n_head / n_kv_head;
  const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
  const Eigen::OuterStride<> qs(in.q_stride), kvs(in.kv_stride), gqs(grad.q_stride), gkvs(grad.kv_stride);
  Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * Tn * D > 32768)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t kvh = 0; kvh < n_kv_head; ++kvh) {
      ConstStridedMatrixMap<T> k(in.k + b * Tn * in.kv_stride + kvh * D, Tn, D, kvs);
      ConstStridedMatrixMap<T> v(in.v + b * Tn * in.kv_stride + kvh * D, Tn, D, kvs);
      StridedMatrixMap<T> dk(grad.k + b * Tn * grad.kv_stride + kvh * D, Tn, D, gkvs);
      StridedMatrixMap<T> dv(grad.v + b * Tn * grad.kv_stride + kvh * D, Tn, D, gkvs);
      for (int64_t r = 0; r < group; ++r) {
        const int64_t h = kvh * group + r;
        ConstStridedMatrixMap<T> q(in.q + b * Tn * in.q_stride + h * D, Tn, D, qs);
        StridedMatrixMap<T> dq(grad.q + b * Tn * grad.q_stride + h * D, Tn, D, gqs);
        ConstMatrixMap<T> p(probs + (b * n_head + h) * Tn * Tn, Tn, Tn);
        ConstStridedMatrixMap<T> d_o(dout + b * Tn * C + h * D, Tn, D, Eigen::OuterStride<>(C));
        if (r == 0)
          dv.noalias() = p.transpose() * d_o;
        else
          dv.noalias() += p.transpose() * d_o;
        RowMatrix<T> dp = d_o * v.transpose();
        // Softmax backward row by row: dS = P * (dP - rowsum(dP * P)); masked entries have P = 0.
        for (int64_t i = 0; i < Tn; ++i) {
          const T dot = (dp.row(i).array() * p.row(i).array()).sum();
          dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot)).matrix();
        }
        dp *= scale;
        dq.noalias() = dp * k;
        if (r == 0)
          dk.noalias() = dp.transpose() * q;
        else
          dk.noalias() += dp.transpose() * q;
      }
    }
  }
  Eigen::setNbThreads(0);
}

}  // namespace

void attention_forward(const Tensor& qkv_in, int n_head, Tensor& out_in, Tensor& probs_in) {
  Tensor qkv = widen(qkv_in);
  OutputSlot out_slot(out_in), probs_slot(probs_in);
  dispatch_real(qkv.dtype(), [&]<typename T>() {
    const int64_t C = qkv.size(2) / 3;
    const T* base = qkv.data<T>();
    forward<T>({base, base + C, base + 2 * C, 3 * C, 3 * C}, qkv.size(0), qkv.size(1), n_head, n_head, C / n_head,
               out_slot.get().data<T>(), probs_slot.get().data<T>());
  });
  out_slot.finish();
  probs_slot.finish();
}

void attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, int n_head, int n_kv_head,
                       Tensor& out_in, Tensor& probs_in) {
  Tensor q = widen(q_in), k = widen(k_in), v = widen(v_in);
  OutputSlot out_slot(out_in), probs_slot(probs_in);
  dispatch_real(q.dtype(), [&]<typename T>() {
    const int64_t D = q.size(2) / n_head;
    forward<T>({q.data<T>(), k.data<T>(), v.data<T>(), q.size(2), k.size(2)}, q.size(0), q.size(1), n_head, n_kv_head,
               D, out_slot.get().data<T>(), probs_slot.get().data<T>());
  });
  out_slot.finish();
  probs_slot.finish();
}

void attention_backward(const Tensor& dout_in, const Tensor& qkv_in, const Tensor& probs_in, int n_head,
                        Tensor& dqkv_in) {
  Tensor dout = widen(dout_in), qkv = widen(qkv_in), probs = widen(probs_in);
  OutputSlot slot(dqkv_in);
  dispatch_real(qkv.dtype(), [&]<typename T>() {
    const int64_t C = qkv.size(2) / 3;
    const T* base = qkv.data<T>();
    T* grad = slot.get().data<T>();
    backward<T>(dout.data<T>(), {base, base + C, base + 2 * C, 3 * C, 3 * C}, probs.data<T>(), qkv.size(0), qkv.size(1),
                n_head, n_head, C / n_head, {grad, grad + C, grad + 2 * C, 3 * C, 3 * C});
  });
  slot.finish();
}

void attention_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const Tensor& probs_in, int n_head, int n_kv_head, Tensor& dq_in, Tensor& dk_in,
                        Tensor& dv_in) {
  Tensor dout = widen(dout_in), q = widen(q_in), k = widen(k_in), v = widen(v_in), probs = widen(probs_in);
  OutputSlot dq(dq_in), dk(dk_in), dv(dv_in);
  dispatch_real(q.dtype(), [&]<typename T>() {
    backward<T>(dout.data<T>(), {q.data<T>(), k.data<T>(), v.data<T>(), q.size(2), k.size(2)}, probs.data<T>(),
                q.size(0), q.size(1), n_head, n_kv_head, q.size(2) / n_head,
                {dq.get().data<T>(), dk.get().data<T>(), dv.get().data<T>(), q.size(2), k.size(2)});
  });
  dq.finish();
  dk.finish();
  dv.finish();
}

}  // namespace retort::kernels::cpu
