// The CPU passes of the vocab-parallel top-k distillation losses: the reference the CUDA kernels are tested
// against. The student is widened once (bf16 -> f32) and the cached log-probs brought to the student's compute
// type; z = x / T and every exp are in that type (float, or double for f64), the row sums accumulate in double
// either way. A row marks the S members its shard owns in a per-thread slot table (set, used, then cleared: O(k)
// per row), so the rest bucket is a plain masked sum. Statistics are stored in the compute type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/cpu/loss_rows.h"
#include "losses/kernels/topk_distillation_kernels.h"
#include "losses/kernels/topk_distillation_row_math.h"

namespace retort::losses::kernels::topk::cpu {

using cpu_rows::like;
using cpu_rows::worth_threads;
using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_valid(const Tensor& labels, const Tensor& mask, int64_t row, int ignore_index) {
  if (mask.defined() && mask.data<int32_t>()[row] == 0) return false;
  return !labels.defined() || labels.data<int32_t>()[row] != ignore_index;
}

// For each column of the shard, the slot (0..k-1) of the S member it is, or -1. Owned per thread; a row sets
// its members and clears them again, so nothing proportional to the shard is touched per row.
class SlotTable {
 public:
  explicit SlotTable(int64_t vocab_local) : slot_(static_cast<size_t>(vocab_local), -1) {}
  // Marks the members of S in [start, start + vocab_local); returns how many there are.
  int64_t mark(const int32_t* ids, int64_t k, int64_t start) {
    owned_.clear();
    for (int64_t i = 0; i < k; ++i) {
      const int64_t local = static_cast<int64_t>(ids[i]) - start;
      if (local < 0 || local >= static_cast<int64_t>(slot_.size())) continue;
      slot_[static_cast<size_t>(local)] = static_cast<int32_t>(i);
      owned_.push_back(local);
    }
    return static_cast<int64_t>(owned_.size());
  }
  void clear() {
    for (int64_t local : owned_) slot_[static_cast<size_t>(local)] = -1;
  }
  int32_t slot(int64_t local) const { return slot_[static_cast<size_t>(local)]; }
  const std::vector<int64_t>& owned() const { return owned_; }

 private:
  std::vector<int32_t> slot_;
  std::vector<int64_t> owned_;
};

// (max, sum of e^{v - max}) of a stream, sums in double.
template <typename T>
struct Lse {
  T max = -std::numeric_limits<T>::infinity();
  double sum = 0;
  void add_max(T v) { max = std::max(max, v); }
  void add_exp(T v) {
    if (v != -std::numeric_limits<T>::infinity()) sum += std::exp(v - max);
  }
};

}  // namespace

void local_stats(const Tensor& student_in, const Tensor& indices, const Tensor& logprobs_in, const Tensor& labels,
                 const TopkParams& p, Tensor& local_max, Tensor& partials, Tensor& row_stats) {
  const Tensor student = widen(student_in);
  const Tensor logprobs = like(logprobs_in, student);
  const int64_t rows = student.size(0), vocab = student.size(1), k = indices.size(1);
  dispatch_real(student.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T inv_t = static_cast<T>(p.inv_temperature), ts = static_cast<T>(p.teacher_scale);
    const bool renormalized = p.kind == Kind::ForwardKLRenormalized;
#pragma omp parallel if (worth_threads(rows, vocab))
    {
      SlotTable table(vocab);
#pragma omp for
      for (int64_t r = 0; r < rows; ++r) {
        const T* xs = student.data<T>() + r * vocab;
        const T* ls = logprobs.data<T>() + r * k;
        const int32_t* ids = indices.data<int32_t>() + r * k;
        T* stats = row_stats.data<T>() + r * kRowColumns;
        // The teacher over S, the same on every rank: logsumexp of the scaled log-probs, then the weights. In
        // double: log p_rest = log(1 - e^lse) turns the rounding of an lse near 0 into a relative error of
        // p_rest (ulp(0.5) / p_rest in float).
        Lse<double> teacher;
        for (int64_t i = 0; i < k; ++i) teacher.add_max(static_cast<double>(ls[i] * ts));
        for (int64_t i = 0; i < k; ++i) teacher.add_exp(static_cast<double>(ls[i] * ts));
        const double log_mass = teacher.max + std::log(teacher.sum);  // -inf: no mass
        const T teacher_log_mass = static_cast<T>(log_mass);
        stats[kRowTeacherLogMass] = teacher_log_mass;
        stats[kRowTeacherLogRest] = static_cast<T>(teacher_log_rest_of(p.kind, log_mass));
        // The S members this shard owns.
        table.mark(ids, k, p.vocab_start);
        Lse<T> top;
        for (int64_t local : table.owned()) top.add_max(xs[local] * inv_t);
        double top_sum = 0, weight = 0, forward = 0, reverse = 0;
        for (int64_t local : table.owned()) {
          const T z = xs[local] * inv_t, l = ls[table.slot(local)] * ts;
          const T log_w = renormalized ? l - teacher_log_mass : l;
          const T w = std::exp(log_w);
          const T e = z == kNegInf ? T(0) : std::exp(z - top.max);
          top_sum += e;
          weight += w;
          if (w > T(0)) forward += z == kNegInf ? kInf : static_cast<double>(w) * (log_w - (z - top.max));
          if (z != kNegInf) reverse += l == kNegInf ? kInf : static_cast<double>(e) * ((z - top.max) - l);
        }
        // One read of the shard for the rest bucket (and the raw sum the CE may need).
        Lse<T> rest, raw;
        if (p.scan_columns) {
          for (int64_t j = 0; j < vocab; ++j) {
            if (table.slot(j) < 0) rest.add_max(xs[j] * inv_t);
            if (p.ce_separate) raw.add_max(xs[j]);
          }
          for (int64_t j = 0; j < vocab; ++j) {
            if (table.slot(j) < 0) rest.add_exp(xs[j] * inv_t);
            if (p.ce_separate) raw.add_exp(xs[j]);
          }
        }
        double label_logit = 0;
        if (uses_ce(p) && labels.defined()) {
          const int64_t local = static_cast<int64_t>(labels.data<int32_t>()[r]) - p.vocab_start;
          if (local >= 0 && local < vocab) label_logit = xs[local];
        }
        table.clear();
        T* mx = local_max.data<T>() + r * kMaxColumns;
        mx[kTopMax] = top.max;
        mx[kRestMax] = rest.max;
        mx[kRawMax] = raw.max;
        T* out = partials.data<T>() + r * kPartialColumns;
        out[kTopSum] = static_cast<T>(top_sum);
        out[kRestSum] = static_cast<T>(rest.sum);
        out[kTopWeight] = static_cast<T>(weight);
        out[kForwardCross] = static_cast<T>(forward);
        out[kReverseCross] = static_cast<T>(reverse);
        out[kRawSum] = static_cast<T>(raw.sum);
        out[kLabelLogit] = static_cast<T>(label_logit);
      }
    }
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, Tensor& partials) {
  const int64_t rows = local_max.size(0);
  dispatch_real(partials.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      const T* lm = local_max.data<T>() + r * kMaxColumns;
      const T* gm = global_max.data<T>() + r * kMaxColumns;
      T* out = partials.data<T>() + r * kPartialColumns;
      const T top_r = lm[kTopMax], top = gm[kTopMax];
      out[kRestSum] = moved(out[kRestSum], lm[kRestMax], gm[kRestMax]);
      out[kRawSum] = moved(out[kRawSum], lm[kRawMax], gm[kRawMax]);
      if (top_r == kNegInf) continue;  // no finite S member here: its top partials are 0 or +inf already
      // w (log w - (z - m_S)) = w (log w - (z - m_S,r)) + w (m_S - m_S,r); the reverse terms likewise, weighted
      // by e^{z - m_S} = e^{z - m_S,r} e^{m_S,r - m_S}.
      const T shift = top - top_r, factor = std::exp(top_r - top);
      if (!std::isinf(out[kForwardCross])) out[kForwardCross] += out[kTopWeight] * shift;
      if (!std::isinf(out[kReverseCross])) out[kReverseCross] = (out[kReverseCross] - out[kTopSum] * shift) * factor;
      out[kTopSum] *= factor;
    }
  });
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const Tensor& mask,
            const TopkParams& p, Tensor& row_stats, Tensor& loss, Tensor& denominator) {
  const int64_t rows = global_max.size(0);
  dispatch_real(partials.dtype(), [&]<typename T>() {
    const T forward_weight = static_cast<T>(p.forward_weight);
    double total = 0;
    int64_t valid = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T* gm = global_max.data<T>() + r * kMaxColumns;
      const T* in = partials.data<T>() + r * kPartialColumns;
      T* stats = row_stats.data<T>() + r * kRowColumns;
      const auto g = RowGlobals<T>::of(gm[kTopMax], gm[kRestMax], in[kTopSum], in[kRestSum]);
      g.store(stats);
      const T log_p_rest = stats[kRowTeacherLogRest];
      T reverse = 0;
      if (p.kind == Kind::ReverseKL || p.kind == Kind::Mixed)
        reverse = reverse_divergence(g, in[kReverseCross], in[kTopSum], in[kRestSum], log_p_rest);
      stats[kRowReverse] = reverse;
      const bool separate = p.ce_separate;
      stats[kRowRawMax] = separate ? gm[kRawMax] : g.max;
      stats[kRowRawLogSum] = separate ? std::log(in[kRawSum]) : g.log_sum;
      if (!is_valid(labels, mask, r, p.ignore_index)) continue;
      ++valid;
      double row = 0;
      if (uses_kd(p)) {
        T kd = 0;
        switch (p.kind) {
          case Kind::ForwardKLRenormalized:
            kd = renormalized_divergence(g, in[kForwardCross], in[kTopWeight]);
            break;
          case Kind::ForwardKLRest:
            kd = forward_rest_divergence(g, in[kForwardCross], in[kTopWeight], log_p_rest);
            break;
          case Kind::ReverseKL:
            kd = reverse;
            break;
          case Kind::ForwardKLSampled:
            kd = sampled_divergence(g, in[kForwardCross], in[kTopWeight]);
            break;
          case Kind::Mixed:
            kd = forward_weight * forward_rest_divergence(g, in[kForwardCross], in[kTopWeight], log_p_rest) +
                 (T(1) - forward_weight) * reverse;
            break;
        }
        row += p.kd_ratio * p.loss_scale * static_cast<double>(kd);
      }
      // Cross-entropy on the label at temperature 1: lse_raw - x_y, the maximum subtracted first.
      if (uses_ce(p))
        row += (1.0 - p.kd_ratio) *
               (static_cast<double>(stats[kRowRawMax] - in[kLabelLogit]) + static_cast<double>(stats[kRowRawLogSum]));
      total += row;
    }
    cpu_rows::store_reduced<T>(total, valid, p.reduction, p.normalizer, loss, denominator);
  });
}

void backward(const Tensor& student_in, const Tensor& indices, const Tensor& logprobs_in, const Tensor& labels,
              const Tensor& mask, const Tensor& row_stats, const Tensor& grad_output, const Tensor& denominator,
              const TopkParams& p, bool accumulate, Tensor& dstudent_in) {
  const Tensor student = widen(student_in);
  const Tensor logprobs = like(logprobs_in, student);
  OutputSlot slot(dstudent_in, accumulate);
  Tensor& dstudent = slot.get();
  RETORT_CHECK(dstudent.dtype() == student.dtype(), "topk_distillation_loss backward: a {} gradient for {} logits",
               dtype_name(dstudent_in.dtype()), dtype_name(student_in.dtype()));
  const int64_t rows = student.size(0), vocab = student.size(1), k = indices.size(1);
  const double scale = cpu_rows::backward_scale(grad_output, denominator);
  // d/dx = (1/T) d/dz: the chain rule through z = x / T, against the loss's T^2 (or 1).
  const double kd_coef = uses_kd(p) ? scale * p.kd_ratio * p.loss_scale * p.inv_temperature : 0.0;
  const double ce_coef = scale * (1.0 - p.kd_ratio);
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(p.inv_temperature), c_kd = static_cast<T>(kd_coef), c_ce = static_cast<T>(ce_coef);
#pragma omp parallel if (worth_threads(rows, vocab))
    {
      SlotTable table(vocab);
#pragma omp for
      for (int64_t r = 0; r < rows; ++r) {
        const T* xs = student.data<T>() + r * vocab;
        const T* ls = logprobs.data<T>() + r * k;
        T* g = dstudent.data<T>() + r * vocab;
        if (!is_valid(labels, mask, r, p.ignore_index)) {
          if (!accumulate) std::fill_n(g, vocab, T(0));
          continue;
        }
        const T* stats = row_stats.data<T>() + r * kRowColumns;
        const auto row =
            RowGradient<T>::load(stats, p.kind, static_cast<T>(p.forward_weight), static_cast<T>(p.teacher_scale));
        const T raw_max = stats[kRowRawMax], raw_log_sum = stats[kRowRawLogSum];
        const int64_t label_local =
            uses_ce(p) && labels.defined() ? static_cast<int64_t>(labels.data<int32_t>()[r]) - p.vocab_start : -1;
        table.mark(indices.data<int32_t>() + r * k, k, p.vocab_start);
        for (int64_t j = 0; j < vocab; ++j) {
          T v = 0;
          if (c_kd != T(0)) {
            const T z = xs[j] * inv_t;
            const int32_t s = table.slot(j);
            v = c_kd * (s >= 0 ? row.top(z, ls[s]) : row.rest(z));
          }
          // (x - m) - log S rather than x - lse: x - m is exact near the top, where the mass is.
          if (c_ce != T(0)) v += c_ce * (std::exp((xs[j] - raw_max) - raw_log_sum) - (j == label_local ? T(1) : T(0)));
          g[j] = accumulate ? g[j] + v : v;
        }
        table.clear();
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::topk::cpu
