// The CPU passes of the vocab-parallel distribution losses: the reference the CUDA kernels are tested against.
// The student is widened once (bf16 -> f32) and the teacher brought to the student's compute type; x' and t' and
// every exp are in that type (float, or double for f64), the row sums accumulate in double either way. Each row
// takes its maxima first and its sums second, both over the shard while it sits in cache (the CUDA kernel keeps
// running maxima instead and reads the shard once). Statistics are stored in the compute type.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/cpu/loss_rows.h"
#include "losses/kernels/distribution_kernels.h"

namespace retort::losses::kernels::distribution::cpu {

using cpu_rows::worth_threads;
using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_valid(const Tensor& labels, int64_t row, int ignore_index) {
  return !labels.defined() || labels.data<int32_t>()[row] != ignore_index;
}

}  // namespace

void local_stats(const Tensor& student_in, const Tensor& teacher_in, const DistributionParams& p, Tensor& local_max,
                 Tensor& partials) {
  const Tensor student = widen(student_in);
  const Tensor teacher = cpu_rows::like(teacher_in, student);
  const int64_t rows = student.size(0), vocab = student.size(1);
  dispatch_real(student.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T inv_t = static_cast<T>(p.inv_temperature);
    T* mx_out = local_max.data<T>();
    T* part = partials.data<T>();
#pragma omp parallel for if (worth_threads(rows, vocab))
    for (int64_t r = 0; r < rows; ++r) {
      const T* xs = student.data<T>() + r * vocab;
      const T* ts = teacher.data<T>() + r * vocab;
      T mx = kNegInf, mt = kNegInf;
      for (int64_t j = 0; j < vocab; ++j) {
        mx = std::max(mx, xs[j] * inv_t);
        mt = std::max(mt, ts[j] * inv_t);
      }
      // A shard of -inf only (m = -inf) adds 0 to its sums: every term below is skipped for it.
      double s = 0, z = 0, cross = 0;
      bool infinite = false;
      for (int64_t j = 0; j < vocab; ++j) {
        const T x = xs[j] * inv_t, t = ts[j] * inv_t;
        const bool x_in = x != kNegInf, t_in = t != kNegInf;
        const T ex = x_in ? std::exp(x - mx) : T(0), et = t_in ? std::exp(t - mt) : T(0);
        s += ex;
        z += et;
        switch (p.divergence) {
          case Kind::ForwardKL:  // p_j (t' - x'): 0 where p_j = 0, +inf where only the student rules j out
            if (t_in && x_in) cross += static_cast<double>(et) * (t - x);
            infinite |= t_in && !x_in;
            break;
          case Kind::SoftCrossEntropy:  // p_j (m_x - x') >= 0
            if (t_in && x_in) cross += static_cast<double>(et) * (mx - x);
            infinite |= t_in && !x_in;
            break;
          case Kind::ReverseKL:  // q_j (x' - t'): 0 where q_j = 0, +inf where only the teacher rules j out
            if (x_in && t_in) cross += static_cast<double>(ex) * (x - t);
            infinite |= x_in && !t_in;
            break;
        }
      }
      mx_out[r * kMaxColumns + kStudentMax] = mx;
      mx_out[r * kMaxColumns + kTeacherMax] = mt;
      T* out = part + r * kPartialColumns;
      out[kStudentSum] = static_cast<T>(s);
      out[kTeacherSum] = static_cast<T>(z);
      out[kCross] = static_cast<T>(infinite ? kInf : cross);
    }
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, const DistributionParams& p, Tensor& partials) {
  const int64_t rows = local_max.size(0);
  dispatch_real(partials.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T* lm = local_max.data<T>();
    const T* gm = global_max.data<T>();
    T* part = partials.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T mx_r = lm[r * kMaxColumns + kStudentMax], mt_r = lm[r * kMaxColumns + kTeacherMax];
      const T mx = gm[r * kMaxColumns + kStudentMax], mt = gm[r * kMaxColumns + kTeacherMax];
      T* out = part + r * kPartialColumns;
      // A side whose shard maximum is -inf has sums 0 already (and e^{-inf - -inf} would be NaN).
      const T to_x = mx_r == kNegInf ? T(0) : std::exp(mx_r - mx);
      const T to_t = mt_r == kNegInf ? T(0) : std::exp(mt_r - mt);
      const T z_r = out[kTeacherSum];
      out[kStudentSum] *= to_x;
      out[kTeacherSum] *= to_t;
      T& cross = out[kCross];
      if (std::isinf(cross)) continue;  // +inf stays +inf (and never meets a factor that underflowed to 0)
      switch (p.divergence) {
        case Kind::ForwardKL:
          cross *= to_t;
          break;
        case Kind::SoftCrossEntropy:
          // sum p_j (m_x,r - x') -> sum p_j (m_x - x'): each term grows by m_x - m_x,r >= 0. A finite D_r with
          // teacher mass implies a finite student shard maximum.
          if (mt_r != kNegInf) cross = (cross + z_r * (mx - mx_r)) * to_t;
          break;
        case Kind::ReverseKL:
          cross *= to_x;
          break;
      }
    }
  });
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const DistributionParams& p,
            Tensor& row_stats, Tensor& loss, Tensor& denominator) {
  const int64_t rows = global_max.size(0);
  dispatch_real(partials.dtype(), [&]<typename T>() {
    const T* gm = global_max.data<T>();
    const T* part = partials.data<T>();
    T* stats = row_stats.data<T>();
    double total = 0;
    int64_t valid = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double mx = gm[r * kMaxColumns + kStudentMax], mt = gm[r * kMaxColumns + kTeacherMax];
      const T* in = part + r * kPartialColumns;
      const double s = in[kStudentSum], z = in[kTeacherSum], cross = in[kCross];
      const double log_s = std::log(s), log_z = std::log(z);
      T* out = stats + r * kRowColumns;
      out[kRowStudentMax] = static_cast<T>(mx);
      out[kRowStudentLogSum] = static_cast<T>(log_s);
      out[kRowTeacherMax] = static_cast<T>(mt);
      out[kRowTeacherLogSum] = static_cast<T>(log_z);
      out[kRowCentre] = T(0);
      if (!is_valid(labels, r, p.ignore_index)) continue;
      ++valid;
      double divergence = 0;
      switch (p.divergence) {
        case Kind::ForwardKL:  // A / Z - lse_t' + lse_x', the maxima subtracted first (they may be large)
          divergence = cross / z + (mx - mt) + (log_s - log_z);
          break;
        case Kind::SoftCrossEntropy:  // E_p[m_x - x'] + log S
          divergence = cross / z + log_s;
          break;
        case Kind::ReverseKL:  // B / S - lse_x' + lse_t'
          out[kRowCentre] = static_cast<T>(cross / s);
          divergence = cross / s - (mx - mt) - (log_s - log_z);
          break;
      }
      total += p.loss_scale * divergence;
    }
    cpu_rows::store_reduced<T>(total, valid, p.reduction, p.normalizer, loss, denominator);
  });
}

void backward(const Tensor& student_in, const Tensor& teacher_in, const Tensor& labels, const Tensor& row_stats,
              const Tensor& grad_output, const Tensor& denominator, const DistributionParams& p, bool accumulate,
              Tensor& dstudent_in) {
  const Tensor student = widen(student_in);
  const Tensor teacher = cpu_rows::like(teacher_in, student);
  OutputSlot slot(dstudent_in, accumulate);
  Tensor& dstudent = slot.get();
  RETORT_CHECK(dstudent.dtype() == student.dtype(), "distribution_loss backward: a {} gradient for {} logits",
               dtype_name(dstudent_in.dtype()), dtype_name(student_in.dtype()));
  const int64_t rows = student.size(0), vocab = student.size(1);
  // d/dx = (1/T) d/dx': the chain rule through x / T, against the loss's T^2 (or 1).
  const double coef = cpu_rows::backward_scale(grad_output, denominator) * p.loss_scale * p.inv_temperature;
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(p.inv_temperature), c = static_cast<T>(coef);
    const T* stats = row_stats.data<T>();
#pragma omp parallel for if (worth_threads(rows, vocab))
    for (int64_t r = 0; r < rows; ++r) {
      const T* xs = student.data<T>() + r * vocab;
      const T* ts = teacher.data<T>() + r * vocab;
      T* g = dstudent.data<T>() + r * vocab;
      if (!is_valid(labels, r, p.ignore_index)) {
        if (!accumulate) std::fill_n(g, vocab, T(0));
        continue;
      }
      const T* st = stats + r * kRowColumns;
      const T mx = st[kRowStudentMax], log_s = st[kRowStudentLogSum];
      const T mt = st[kRowTeacherMax], log_z = st[kRowTeacherLogSum], centre = st[kRowCentre];
      for (int64_t j = 0; j < vocab; ++j) {
        const T x = xs[j] * inv_t, t = ts[j] * inv_t;
        // (x' - m) - log S rather than x' - lse: x' - m is exact near the top, where the mass is.
        const T q = std::exp((x - mx) - log_s);  // exactly 0 for a -inf logit
        T v;
        if (p.divergence == Kind::ReverseKL) {
          v = q == T(0) ? T(0) : c * q * ((x - t) - centre);
        } else {
          v = c * (q - std::exp((t - mt) - log_z));
        }
        g[j] = accumulate ? g[j] + v : v;
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::distribution::cpu
