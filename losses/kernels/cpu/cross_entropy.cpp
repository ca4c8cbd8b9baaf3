// The CPU passes of the vocab-parallel cross-entropy: the reference the CUDA kernels are tested against.
// exp in float for f32 / bf16 logits (bf16 widened once) and in double for f64; the row sums accumulate in
// double either way, so the reference is not limited by the order of a long float sum. Statistics are stored
// in the logits' compute type (f32, or f64 for f64 logits).
#include <cmath>
#include <limits>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/cpu/loss_rows.h"
#include "losses/kernels/cross_entropy_kernels.h"

namespace retort::losses::kernels::cpu {

using cpu_rows::worth_threads;
using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {

bool owns(int64_t target, const CrossEntropyParams& p, int64_t vocab_local) {
  return target >= p.vocab_start && target < p.vocab_start + vocab_local;
}

}  // namespace

void local_stats(const Tensor& logits_in, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,
                 Tensor& partials) {
  const Tensor logits = widen(logits_in);
  const int64_t rows = logits.size(0), vocab = logits.size(1), cols = partials.size(1);
  const int32_t* t = targets.data<int32_t>();
  dispatch_real(logits.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    T* mx = local_max.data<T>();
    T* part = partials.data<T>();
#pragma omp parallel for if (worth_threads(rows, vocab))
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = logits.data<T>() + r * vocab;
      T m = kNegInf;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, x[j]);
      double s = 0, shifted = 0;
      if (m == kNegInf) {
        shifted = -INFINITY;  // a shard of -inf only: S_r = 0 and the smoothing sum is -inf, never NaN
      } else {
        for (int64_t j = 0; j < vocab; ++j) {
          const T d = x[j] - m;  // -inf for a -inf logit: exp gives exactly 0 and the sum becomes -inf
          s += std::exp(d);
          shifted += d;
        }
      }
      mx[r] = m;
      T* out = part + r * cols;
      out[kSumExp] = static_cast<T>(s);
      out[kTargetLogit] = t[r] != p.ignore_index && owns(t[r], p, vocab) ? x[t[r] - p.vocab_start] : T(0);
      if (cols > kShiftedSum) out[kShiftedSum] = static_cast<T>(shifted);
    }
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials) {
  const int64_t rows = local_max.numel(), cols = partials.size(1);
  dispatch_real(partials.dtype(), [&]<typename T>() {
    const T* lm = local_max.data<T>();
    const T* gm = global_max.data<T>();
    T* part = partials.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isinf(lm[r]) && lm[r] < 0) continue;  // S_r = 0 already; the shifted sum stays -inf
      T* out = part + r * cols;
      const T shift = lm[r] - gm[r];
      out[kSumExp] *= std::exp(shift);
      if (cols > kShiftedSum) out[kShiftedSum] += static_cast<T>(vocab_local) * shift;
    }
  });
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& targets, const CrossEntropyParams& p,
            Tensor& lse, Tensor& loss, Tensor& denominator) {
  const int64_t rows = targets.numel(), cols = partials.ndim() == 2 ? partials.size(1) : 0;
  const int32_t* t = targets.data<int32_t>();
  dispatch_real(partials.dtype(), [&]<typename T>() {
    const T* gm = global_max.data<T>();
    const T* part = partials.data<T>();
    T* l = lse.data<T>();
    double total = 0;
    int64_t valid = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = part + r * cols;
      const double log_s = std::log(static_cast<double>(in[kSumExp]));
      l[r] = static_cast<T>(gm[r] + log_s);
      if (t[r] == p.ignore_index) continue;
      ++valid;
      // lse - x_y as (m - x_y) + log S: m and x_y are both logits, so logits x1000 lose nothing to cancellation.
      double row = (1.0 - p.smoothing) * ((static_cast<double>(gm[r]) - in[kTargetLogit]) + log_s);
      if (p.smoothing != 0.0) row -= p.smoothing * (in[kShiftedSum] / static_cast<double>(p.vocab_total) - log_s);
      if (p.z_loss != 0.0) row += p.z_loss * (gm[r] + log_s) * (gm[r] + log_s);
      total += row;
    }
    cpu_rows::store_reduced<T>(total, valid, p.reduction, p.normalizer, loss, denominator);
  });
}

void backward(const Tensor& logits_in, const Tensor& targets, const Tensor& lse, const Tensor& grad_output,
              const Tensor& denominator, const CrossEntropyParams& p, bool accumulate, Tensor& dlogits_in) {
  const Tensor logits = widen(logits_in);
  OutputSlot slot(dlogits_in, accumulate);
  Tensor& dlogits = slot.get();
  RETORT_CHECK(dlogits.dtype() == logits.dtype(), "cross_entropy backward: a {} gradient for {} logits",
               dtype_name(dlogits_in.dtype()), dtype_name(logits_in.dtype()));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int32_t* t = targets.data<int32_t>();
  const double coef = cpu_rows::backward_scale(grad_output, denominator);
  dispatch_real(logits.dtype(), [&]<typename T>() {
    const T* l = lse.data<T>();
    const T uniform = static_cast<T>(p.smoothing / static_cast<double>(p.vocab_total));
    const T label = static_cast<T>(1.0 - p.smoothing);
#pragma omp parallel for if (worth_threads(rows, vocab))
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = logits.data<T>() + r * vocab;
      T* g = dlogits.data<T>() + r * vocab;
      if (t[r] == p.ignore_index) {
        if (!accumulate) std::fill_n(g, vocab, T(0));
        continue;
      }
      const T c = static_cast<T>(coef);
      const T q_scale = static_cast<T>(1.0 + 2.0 * p.z_loss * l[r]);  // z-loss adds 2 w lse q_j
      const int64_t own = owns(t[r], p, vocab) ? t[r] - p.vocab_start : -1;
      for (int64_t j = 0; j < vocab; ++j) {
        const T q = std::exp(x[j] - l[r]);  // exactly 0 for a -inf logit
        const T v = c * (q * q_scale - uniform - (j == own ? label : T(0)));
        g[j] = accumulate ? g[j] + v : v;
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::cpu
