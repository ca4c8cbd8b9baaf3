#pragma once
// The per-row formulas of the top-k distillation losses, written once for both backends: the CPU passes call
// them with T = float or double, the CUDA kernels with float (hence __host__ __device__ under nvcc). The math
// is documented in topk_distillation.h; the column layouts in topk_distillation_kernels.h.
#include <cmath>
#include <limits>

#include "losses/kernels/topk_distillation_kernels.h"

#ifdef __CUDACC__
#define RETORT_TOPK_HD __host__ __device__ __forceinline__
#else
#define RETORT_TOPK_HD inline
#endif

namespace retort::losses::kernels::topk {

// logsumexp_S of the cached log-probs is clamped to at most this before log p_rest = log(1 - e^that): a cache
// whose k values hold all the mass (or, rounded, a little more) keeps a rest bucket of ~1e-7, never log 0.
inline constexpr double kMaxTeacherLogMass = -1e-7;
// log q_rest is clamped to at least this where it enters the loss as a log: a student with no tail at all
// (k = V, or a tail of -inf) then gets a finite loss against the clamped teacher tail instead of +inf. The
// gradient never uses the clamp (the tail's q_j / q_rest comes from the masked sum directly).
inline constexpr double kMinLogStudentRest = -100.0;

// log(1 - e^a) for a <= 0 without cancellation (Maechler 2012: expm1 near 0, log1p further out).
template <typename T>
RETORT_TOPK_HD T log1mexp(T a) {
  return a > T(-0.6931471805599453) ? std::log(-std::expm1(a)) : std::log1p(-std::exp(a));
}

template <typename T>
RETORT_TOPK_HD T teacher_log_rest(T teacher_log_mass) {
  const T clamped = teacher_log_mass < T(kMaxTeacherLogMass) ? teacher_log_mass : T(kMaxTeacherLogMass);
  return log1mexp(clamped);
}

// e^{a - m} * s with the rule that a side whose maximum is -inf holds nothing (and -inf - -inf is no NaN).
template <typename T>
RETORT_TOPK_HD T moved(T s, T a, T m) {
  return a == -std::numeric_limits<T>::infinity() ? T(0) : s * std::exp(a - m);
}

// The global statistics of one row from the reduced maxima and partials (see the kRow* columns).
template <typename T>
struct RowGlobals {
  T max, log_sum, top_max, top_log_sum, rest_max, rest_log_sum;

  RETORT_TOPK_HD static RowGlobals of(T top_max, T rest_max, T top_sum, T rest_sum) {
    RowGlobals g;
    g.top_max = top_max;
    g.rest_max = rest_max;
    g.max = top_max > rest_max ? top_max : rest_max;
    // Two sums of positive terms, each relative to its own maximum: no cancellation, no underflow of the
    // smaller side's relevant terms.
    g.log_sum = std::log(moved(top_sum, top_max, g.max) + moved(rest_sum, rest_max, g.max));
    g.top_log_sum = std::log(top_sum);
    g.rest_log_sum = std::log(rest_sum);
    return g;
  }
  RETORT_TOPK_HD static RowGlobals load(const T* row) {
    return {row[kRowMax], row[kRowLogSum], row[kRowTopMax], row[kRowTopLogSum], row[kRowRestMax], row[kRowRestLogSum]};
  }
  RETORT_TOPK_HD void store(T* row) const {
    row[kRowMax] = max;
    row[kRowLogSum] = log_sum;
    row[kRowTopMax] = top_max;
    row[kRowTopLogSum] = top_log_sum;
    row[kRowRestMax] = rest_max;
    row[kRowRestLogSum] = rest_log_sum;
  }
  // lse - m_S, with lse = m + log_sum over the whole vocabulary.
  RETORT_TOPK_HD T lse_above_top() const { return (max - top_max) + log_sum; }
  // log q_rest = log sum_{not S} q_j, exact however small (-inf for an empty rest bucket).
  RETORT_TOPK_HD T log_student_rest() const { return (rest_max - max) + rest_log_sum - log_sum; }
  RETORT_TOPK_HD T clamped_log_student_rest() const {
    const T v = log_student_rest();
    return v > T(kMinLogStudentRest) ? v : T(kMinLogStudentRest);
  }
};

// The divergences of one row from its globals and reduced partials.
//   forward KL, rest bucket: sum_S p_j (l_j - log q_j) + p_rest (log p_rest - log q_rest)
//                          = E + P (lse - m_S) + p_rest (log p_rest - log q_rest)
//   reverse KL:              sum_S q_j (log q_j - l_j) + q_rest (log q_rest - log p_rest)
//                          = e^{m_S - lse} (B - Q (lse - m_S)) + q_rest (log q_rest - log p_rest)
//   renormalized forward KL: sum_S p^_j (log p^_j - log q^_j) = E + P^ log Q
// with E, B, P, Q the kForwardCross, kReverseCross, kTopWeight and kTopSum partials.
template <typename T>
RETORT_TOPK_HD T forward_rest_divergence(const RowGlobals<T>& g, T cross, T weight, T log_p_rest) {
  if (std::isinf(cross)) return cross;  // teacher mass on a token the student rules out
  const T on_top = weight > T(0) ? cross + weight * g.lse_above_top() : cross;
  return on_top + std::exp(log_p_rest) * (log_p_rest - g.clamped_log_student_rest());
}

template <typename T>
RETORT_TOPK_HD T reverse_divergence(const RowGlobals<T>& g, T cross, T top_sum, T rest_sum, T log_p_rest) {
  T on_top = T(0);
  if (std::isinf(cross)) {
    on_top = cross;  // student mass on a token the teacher rules out
  } else if (top_sum > T(0)) {
    const T above = g.lse_above_top();
    on_top = std::exp(-above) * (cross - top_sum * above);
  }
  if (!(rest_sum > T(0))) return on_top;
  const T log_q_rest = g.clamped_log_student_rest();
  return on_top + std::exp(log_q_rest) * (log_q_rest - log_p_rest);
}

// The sampled forward KL: sum_S a_j (log a_j - log q_j) = E + A (lse - m_S), the rest-bucket formula without the
// bucket (the weights a_j are the whole target; the columns outside S have target 0).
template <typename T>
RETORT_TOPK_HD T sampled_divergence(const RowGlobals<T>& g, T cross, T weight) {
  if (std::isinf(cross)) return cross;  // target weight on a token the student rules out
  return weight > T(0) ? cross + weight * g.lse_above_top() : cross;
}

// The teacher's log rest mass a kind keeps: none for the renormalized KL (0, unused), none for the sampled targets
// (-inf: p_rest = 0, so the forward gradient below is A q_j - a_j on S and A q_j off S), the clamped tail otherwise.
template <typename T>
RETORT_TOPK_HD T teacher_log_rest_of(Kind kind, T teacher_log_mass) {
  if (kind == Kind::ForwardKLRenormalized) return T(0);
  if (kind == Kind::ForwardKLSampled) return -std::numeric_limits<T>::infinity();
  return teacher_log_rest(teacher_log_mass);
}

template <typename T>
RETORT_TOPK_HD T renormalized_divergence(const RowGlobals<T>& g, T cross, T weight) {
  return std::isinf(cross) ? cross : cross + weight * g.top_log_sum;
}

// The gradient of one row's divergence wrt z = x / T (the caller multiplies by loss_scale / T and the rest).
// Built once per row from its saved statistics; top() for a column in S with cached log-prob l, rest() for a
// column outside S.
//   forward KL, rest bucket: W q_j - p_j on S, W q_j - p_rest q_j / q_rest off S, with W = P + p_rest (= 1 when
//                            the cache's mass and the rest bucket add up; the exact derivative otherwise)
//   reverse KL:              q_j (l_c(j) - L), l_c = log q_c - log p_c of j's category c
//   renormalized:            q^_j - p^_j on S, 0 off S
//   sampled:                 A q_j - a_j on S, A q_j off S (A = sum_S a_j): the forward formula with p_rest = 0
template <typename T>
struct RowGradient {
  RowGlobals<T> g;
  Kind kind;
  T forward_weight, teacher_scale, teacher_log_mass, p_rest, total_weight, reverse, rest_log_ratio;

  RETORT_TOPK_HD static RowGradient load(const T* row, Kind kind, T forward_weight, T teacher_scale) {
    RowGradient r;
    r.g = RowGlobals<T>::load(row);
    r.kind = kind;
    r.forward_weight = forward_weight;
    r.teacher_scale = teacher_scale;
    r.teacher_log_mass = row[kRowTeacherLogMass];
    const T log_p_rest = row[kRowTeacherLogRest];
    r.p_rest = std::exp(log_p_rest);
    r.total_weight = std::exp(r.teacher_log_mass) + r.p_rest;
    r.reverse = row[kRowReverse];
    r.rest_log_ratio = r.g.clamped_log_student_rest() - log_p_rest;
    return r;
  }

  RETORT_TOPK_HD T q(T z) const { return std::exp((z - g.max) - g.log_sum); }

  RETORT_TOPK_HD T top(T z, T l) const {
    const T qj = q(z);
    const T forward = total_weight * qj - std::exp(l * teacher_scale);
    const T reverse_term = qj == T(0) ? T(0) : qj * (((z - g.max) - g.log_sum - l) - reverse);
    switch (kind) {
      case Kind::ForwardKLRenormalized: {
        const T q_hat = z == -std::numeric_limits<T>::infinity() ? T(0) : std::exp((z - g.top_max) - g.top_log_sum);
        return q_hat - std::exp(l * teacher_scale - teacher_log_mass);
      }
      case Kind::ForwardKLRest:
      case Kind::ForwardKLSampled:
        return forward;
      case Kind::ReverseKL:
        return reverse_term;
      case Kind::Mixed:
        return forward_weight * forward + (T(1) - forward_weight) * reverse_term;
    }
    return T(0);
  }

  RETORT_TOPK_HD T rest(T z) const {
    if (kind == Kind::ForwardKLRenormalized) return T(0);
    const T qj = q(z);
    // q_j / q_rest from the masked sum: at most 1, exact when q_rest is tiny.
    const T share = z == -std::numeric_limits<T>::infinity() ? T(0) : std::exp((z - g.rest_max) - g.rest_log_sum);
    const T forward = total_weight * qj - p_rest * share;
    const T reverse_term = qj == T(0) ? T(0) : qj * (rest_log_ratio - reverse);
    if (kind == Kind::ForwardKLRest || kind == Kind::ForwardKLSampled) return forward;
    if (kind == Kind::ReverseKL) return reverse_term;
    return forward_weight * forward + (T(1) - forward_weight) * reverse_term;
  }
};

}  // namespace retort::losses::kernels::topk
