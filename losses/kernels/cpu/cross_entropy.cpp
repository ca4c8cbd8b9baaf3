// The CPU passes of the vocab-parallel cross-entropy: the reference the CUDA kernels are tested against.
// float math for f32 / bf16 logits (bf16 widened once), double for f64; per-row statistics in f32 tensors, but
// the finishing sums in double.
#include <cmath>
#include <limits>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/cross_entropy_kernels.h"

namespace retort::losses::kernels::cpu {

using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {

bool owns(int64_t target, const CrossEntropyParams& p, int64_t vocab_local) {
  return target >= p.vocab_start && target < p.vocab_start + vocab_local;
}

void check_targets(const int32_t* t, int64_t rows, const CrossEntropyParams& p) {
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] != p.ignore_index && (t[r] < 0 || t[r] >= p.vocab_total))
      throw InputError(
          fmt::format("cross_entropy: target {} at row {} is outside the vocabulary of {} (ignore_index "
                      "is {}): the data and the model disagree on the vocabulary",
                      t[r], r, p.vocab_total, p.ignore_index));
}

}  // namespace

void local_stats(const Tensor& logits_in, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,
                 Tensor& partials) {
  const Tensor logits = widen(logits_in);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int32_t* t = targets.data<int32_t>();
  check_targets(t, rows, p);
  float* mx = local_max.data<float>();
  float* part = partials.data<float>();
  dispatch_real(logits.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for if (rows * vocab > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = logits.data<T>() + r * vocab;
      T m = kNegInf;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, x[j]);
      T s = 0, shifted = 0;
      if (m != kNegInf) {  // a shard of -inf only: S_r = 0, and the shifted sum is -inf (never NaN)
        for (int64_t j = 0; j < vocab; ++j) {
          if (x[j] == kNegInf) continue;  // exp(-inf) = 0 exactly, and no denormal detour
          s += std::exp(x[j] - m);
          shifted += x[j] - m;
        }
        for (int64_t j = 0; j < vocab; ++j)
          if (x[j] == kNegInf) shifted = kNegInf;
      } else {
        shifted = kNegInf;
      }
      mx[r] = static_cast<float>(m);
      float* out = part + r * kPartials;
      out[0] = static_cast<float>(s);
      out[1] = owns(t[r], p, vocab) ? static_cast<float>(x[t[r] - p.vocab_start]) : 0.f;
      out[2] = static_cast<float>(shifted);
    }
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials) {
  const int64_t rows = local_max.numel();
  const float* lm = local_max.data<float>();
  const float* gm = global_max.data<float>();
  float* part = partials.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float* out = part + r * kPartials;
    if (lm[r] == -INFINITY) continue;  // S_r = 0 already; the shifted sum stays -inf
    out[0] *= std::exp(lm[r] - gm[r]);
    out[2] += static_cast<float>(vocab_local) * (lm[r] - gm[r]);
  }
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& targets, const CrossEntropyParams& p,
            Tensor& lse, Tensor& loss, Tensor& denominator) {
  const int64_t rows = targets.numel();
  const float* gm = global_max.data<float>();
  const float* part = partials.data<float>();
  const int32_t* t = targets.data<int32_t>();
  float* l = lse.data<float>();
  double total = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = part + r * kPartials;
    const double log_s = std::log(static_cast<double>(in[0]));
    const double row_lse = gm[r] + log_s;
    l[r] = static_cast<float>(row_lse);
    if (t[r] == p.ignore_index) continue;
    ++valid;
    double row = (1.0 - p.smoothing) * (row_lse - in[1]);
    if (p.smoothing != 0.f) row -= p.smoothing * (in[2] / static_cast<double>(p.vocab_total) - log_s);
    if (p.z_loss != 0.f) row += p.z_loss * row_lse * row_lse;
    total += row;
  }
  double denom = 1.0;
  if (p.reduction == Reduction::Mean) denom = static_cast<double>(std::max<int64_t>(valid, 1));
  if (p.reduction == Reduction::Normalizer) denom = p.normalizer;
  loss.data<float>()[0] = static_cast<float>(total / denom);
  denominator.data<float>()[0] = static_cast<float>(denom);
}

void backward(const Tensor& logits_in, const Tensor& targets, const Tensor& lse, const Tensor& grad_output,
              const Tensor& denominator, const CrossEntropyParams& p, bool accumulate, Tensor& dlogits_in) {
  const Tensor logits = widen(logits_in);
  OutputSlot slot(dlogits_in, accumulate);
  Tensor& dlogits = slot.get();
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int32_t* t = targets.data<int32_t>();
  const float* l = lse.data<float>();
  const double coef = grad_output.item() / denominator.item();
  dispatch_real(logits.dtype(), [&]<typename T>() {
    const T uniform = static_cast<T>(p.smoothing / static_cast<double>(p.vocab_total));
    const T label = static_cast<T>(1.0 - p.smoothing);
#pragma omp parallel for if (rows * vocab > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = logits.data<T>() + r * vocab;
      T* g = dlogits.data<T>() + r * vocab;
      const bool valid = t[r] != p.ignore_index;
      const T c = valid ? static_cast<T>(coef) : T(0);
      const T q_scale = static_cast<T>(1.0 + 2.0 * p.z_loss * l[r]);  // z-loss adds 2 w lse q_j
      const int64_t own = valid && owns(t[r], p, vocab) ? t[r] - p.vocab_start : -1;
      for (int64_t j = 0; j < vocab; ++j) {
        const T q = x[j] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(x[j] - static_cast<T>(l[r]));
        T v = c * (q * q_scale - uniform - (j == own ? label : T(0)));
        g[j] = accumulate ? g[j] + v : v;
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::cpu
