#include "bench/loss/manual_tp_loss.h"

#include <climits>
#include <memory>

#include "core/kernels/kernels.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort::bench {
namespace {

// The building blocks of manual_tp, each one core kernel or collective.
class ManualParts {
 public:
  ManualParts(const LossRun& run, const LossInputs& in) : run_(run), n_(run.tokens), vl_(in.vocab_local) {
    RETORT_INPUT_CHECK(n_ * vl_ + 1 <= INT32_MAX,
                       "manual_tp: {} tokens x {} local columns do not fit the i32 flat index its one-hot gather and "
                       "scatter use",
                       n_, vl_);
    std::vector<int32_t> flat(static_cast<size_t>(n_)), ignore(static_cast<size_t>(n_), kIgnore);
    for (int64_t r = 0; r < n_; ++r) {
      const int64_t local = in.host_targets[r] - run.rank * vl_;
      flat[r] = static_cast<int32_t>(local >= 0 && local < vl_ ? r * vl_ + local : n_ * vl_);  // past the end: not ours
    }
    flat_targets_ = Tensor::from_ints(flat, {n_}, run.device);
    ignore_ = Tensor::from_ints(ignore, {n_}, run.device);
    minus_inv_n_ = Tensor::full({n_, 1}, -1.0 / static_cast<double>(n_), in.student.dtype(), run.device);
  }

  int64_t rows() const { return n_; }
  float inv_n() const { return 1.f / static_cast<float>(n_); }

  Tensor empty(const Shape& shape, DType dtype) const { return Tensor::empty(shape, dtype, run_.device); }

  // Log-sum-exp of every row of x [N, C]: the single-device cross-entropy kernel with every row ignored.
  Tensor row_lse(const Tensor& x) const {
    Tensor lse = empty({n_}, DType::F32), unused = empty({n_}, DType::F32);
    kernels::cross_entropy_forward(x, ignore_, kIgnore, unused, lse);
    return lse;
  }

  // The global log-sum-exp from each shard's, and this shard's weight exp(lse_r - lse) [N]: an all-gather of
  // [N, 1] into [N, tp], then its row log-sum-exp and row softmax.
  struct Global {
    Tensor lse;
    Tensor weight;
  };
  Global global(const Tensor& local_lse) const {
    const int tp = run_.comm->size();
    const Tensor all = run_.comm->all_gather(local_lse.view({n_, 1}), 1);
    Global g{row_lse(all), empty({n_}, DType::F32)};
    Tensor softmax = empty({n_, tp}, DType::F32);
    kernels::softmax_forward(all, softmax);
    device_runtime::copy_2d(g.weight.raw_data(), sizeof(float),
                            static_cast<const char*>(softmax.raw_data()) + run_.rank * sizeof(float),
                            tp * sizeof(float), sizeof(float), static_cast<size_t>(n_), run_.device);
    return g;
  }

  // x[n, target_n] for the rows whose target this shard owns, 0 for the others (f32 [N]): a gather through the
  // flattened logits, as the embedding lookup of a vocab shard.
  Tensor owned_target_logit(const Tensor& x) const {
    Tensor picked = empty({n_, 1}, x.dtype()), out = empty({n_}, DType::F32);
    kernels::embedding_forward(x.view({n_ * vl_, 1}), flat_targets_, 0, n_ * vl_ + 1, picked);
    kernels::cast(picked, out);
    return out;
  }

  // grad[n, target_n] -= 1 / N on the rows this shard owns: the scatter matching owned_target_logit.
  void subtract_one_hot(Tensor& grad) const {
    Tensor flat = grad.view({n_ * vl_, 1});
    kernels::embedding_backward(minus_inv_n_, flat_targets_, 0, n_ * vl_ + 1, flat);
  }

  // out[n, :] = alpha * scale[n] * x[n, :] + beta * out[n, :]: a batched GEMM of [1, 1] x [1, C] per row.
  void scale_rows(const Tensor& scale, const Tensor& x, float alpha, float beta, Tensor& out) const {
    Tensor s = empty({n_, 1, 1}, x.dtype());
    kernels::cast(scale, s);
    Tensor out3 = out.view({n_, 1, vl_});
    kernels::gemm(s, x.view({n_, 1, vl_}), out3, false, false, alpha, beta);
  }

  // sum_j a[n, j] b[n, j] (f32 [N]): a batched GEMM of [1, C] x [C, 1] per row.
  Tensor row_dot(const Tensor& a, const Tensor& b) const {
    Tensor out = empty({n_, 1, 1}, DType::F32);
    kernels::gemm(a.view({n_, 1, vl_}), b.view({n_, 1, vl_}), out, false, true, 1.f, 0.f);
    return out.view({n_});
  }

  Tensor mean(const Tensor& rows) const {
    Tensor out = empty({}, DType::F32);
    kernels::sum(rows, out);
    kernels::scale(out, inv_n(), out);
    return out;
  }

 private:
  static constexpr int kIgnore = -100;
  const LossRun& run_;
  int64_t n_, vl_;
  Tensor flat_targets_;  // i32 [N]: r * Vl + local target, or N * Vl where another shard owns it
  Tensor ignore_;        // i32 [N] of kIgnore
  Tensor minus_inv_n_;   // [N, 1] of -1/N in the logits' dtype
};

LossStep cross_entropy_step(const LossRun& run, const LossInputs& in, std::shared_ptr<const ManualParts> parts) {
  return [&run, &in, parts] {
    const ManualParts& m = *parts;
    const Tensor& x = in.student;
    const auto g = m.global(m.row_lse(x));
    Tensor target = m.owned_target_logit(x);
    run.comm->all_reduce(target, ReduceOp::Sum);
    Tensor row = m.empty({m.rows()}, DType::F32);
    kernels::add(g.lse, target, row, 1.f, -1.f);  // lse - x_y
    const Tensor loss = m.mean(row);
    // Backward: (softmax_r(x) * exp(lse_r - lse) - onehot) / N.
    Tensor p = m.empty(x.shape(), x.dtype());
    kernels::softmax_forward(x, p);
    Tensor grad = m.empty(x.shape(), x.dtype());
    m.scale_rows(g.weight, p, m.inv_n(), 0.f, grad);
    m.subtract_one_hot(grad);
    return StepOut{loss, grad};
  };
}

LossStep kl_step(const LossRun& run, const LossInputs& in, std::shared_ptr<const ManualParts> parts, bool forward_kl) {
  return [&run, &in, parts, forward_kl] {
    const ManualParts& m = *parts;
    const Tensor &x = in.student, &t = in.teacher;
    const auto gx = m.global(m.row_lse(x));
    const auto gt = m.global(m.row_lse(t));
    // forward KL(p || q) = E_p[t - x] - lse_t + lse_x; reverse KL(q || p) = E_q[x - t] - lse_x + lse_t, with the
    // expectation over this shard's softmax s (of t, or of x) times the shard's weight, summed over the ranks.
    Tensor d = m.empty(x.shape(), x.dtype());
    kernels::add(forward_kl ? t : x, forward_kl ? x : t, d, 1.f, -1.f);
    Tensor s = m.empty(x.shape(), x.dtype());
    kernels::softmax_forward(forward_kl ? t : x, s);
    const auto& weighted = forward_kl ? gt : gx;
    Tensor expectation = m.empty({m.rows()}, DType::F32);
    kernels::mul(m.row_dot(s, d), weighted.weight, expectation);
    run.comm->all_reduce(expectation, ReduceOp::Sum);
    Tensor row = m.empty({m.rows()}, DType::F32);
    kernels::add(expectation, forward_kl ? gx.lse : gt.lse, row, 1.f, 1.f);
    kernels::add(row, forward_kl ? gt.lse : gx.lse, row, 1.f, -1.f);
    const Tensor loss = m.mean(row);
    Tensor grad = m.empty(x.shape(), x.dtype());
    if (forward_kl) {  // (q - p) / N
      Tensor q = m.empty(x.shape(), x.dtype());
      kernels::softmax_forward(x, q);
      m.scale_rows(gx.weight, q, m.inv_n(), 0.f, grad);
      m.scale_rows(gt.weight, s, -m.inv_n(), 1.f, grad);
    } else {  // q (x - t - E_q[x - t]) / N
      Tensor qd = m.empty(x.shape(), x.dtype());
      kernels::mul(s, d, qd);
      m.scale_rows(gx.weight, qd, m.inv_n(), 0.f, grad);
      Tensor centre = m.empty({m.rows()}, DType::F32);
      kernels::mul(gx.weight, expectation, centre);
      m.scale_rows(centre, s, -m.inv_n(), 1.f, grad);
    }
    return StepOut{loss, grad};
  };
}

}  // namespace

LossStep manual_tp_step(const LossRun& run, const LossInputs& inputs, LossKind kind) {
  // The index tensors are built once, outside the timed steps, as a user would keep them across steps.
  auto parts = std::make_shared<const ManualParts>(run, inputs);
  if (kind == LossKind::CrossEntropy) return cross_entropy_step(run, inputs, std::move(parts));
  return kl_step(run, inputs, std::move(parts), kind == LossKind::ForwardKL);
}

}  // namespace retort::bench
