// The CPU passes of the vocab-parallel chunk-averaged KL: the reference the CUDA kernels are tested against. The
// student is widened once (bf16 -> f32); z = x / T and every exp are in the compute type (float, or double for
// f64), sums accumulate in double either way. A row marks its chunk's preimage columns in a per-thread table
// (set, used, cleared: O(|preimage|) per row), so the rest bucket is a plain masked sum over the row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/chunk_distillation_kernels.h"
#include "losses/kernels/cpu/loss_rows.h"

namespace retort::losses::kernels::chunk::cpu {

using cpu_rows::worth_threads;
using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {

const int32_t* ints(const Tensor& t) {
  return t.data<int32_t>();
}

// For each local column, its index in the current chunk's preimage list, or -1.
class PreimageTable {
 public:
  explicit PreimageTable(int64_t columns) : index_(static_cast<size_t>(columns), -1) {}
  void mark(const int32_t* columns, int32_t begin, int32_t end) {
    begin_ = begin, end_ = end, columns_ = columns;
    for (int32_t i = begin; i < end; ++i) index_[static_cast<size_t>(columns[i])] = i;
  }
  void clear() {
    for (int32_t i = begin_; i < end_; ++i) index_[static_cast<size_t>(columns_[i])] = -1;
  }
  int32_t at(int64_t column) const { return index_[static_cast<size_t>(column)]; }

 private:
  std::vector<int32_t> index_;
  const int32_t* columns_ = nullptr;
  int32_t begin_ = 0, end_ = 0;
};

template <typename T>
T kl_term(T r, T q, T epsilon) {
  return r == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(r) * (r - std::log(q + epsilon));
}

}  // namespace

void local_stats(const Tensor& student_in, const ChunkPlan& plan, const ChunkParams& p, Tensor& local_max,
                 Tensor& partials) {
  const Tensor student = widen(student_in);
  const int64_t rows = student.size(0), vocab = student.size(1);
  dispatch_real(student.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T inv_t = static_cast<T>(p.inv_temperature);
    const int32_t* row_chunk = ints(plan.row_chunk);
    const int32_t* row_offset = ints(plan.row_column_offset);
    const int32_t* chunk_pre = ints(plan.chunk_preimage);
    const int32_t* pre_column = ints(plan.preimage_column);
    const T* pre_outside = plan.preimage_outside.data<T>();
    const T* column_weight = plan.column_weight.data<T>();
    const int32_t* chunk_slots = ints(plan.chunk_slots);
    const int32_t* slot_entries = ints(plan.slot_entries);
    const int32_t* entry_column = ints(plan.entry_column);
    const T* entry_weight = plan.entry_weight.data<T>();
    T* out = partials.data<T>();
    T* maxima = local_max.data<T>();
#pragma omp parallel if (worth_threads(rows, vocab))
    {
      PreimageTable table(vocab);
#pragma omp for
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t c = row_chunk[r];
        T* row_out = out + r * kRowPartials;
        if (c < 0) {
          maxima[r] = kNegInf;
          row_out[kRowSum] = row_out[kRowRest] = T(0);
          continue;
        }
        const T* xs = student.data<T>() + r * vocab;
        T m = kNegInf;
        for (int64_t j = 0; j < vocab; ++j) m = std::max(m, xs[j] * inv_t);
        maxima[r] = m;
        double sum = 0, rest = 0;
        table.mark(pre_column, chunk_pre[c], chunk_pre[c + 1]);
        if (m != kNegInf) {
          for (int64_t j = 0; j < vocab; ++j) {
            const T z = xs[j] * inv_t;
            if (z == kNegInf) continue;
            const double e = std::exp(z - m);
            const int32_t at = table.at(j);
            sum += e;
            rest += e * static_cast<double>(at >= 0 ? pre_outside[at] : column_weight[j]);
          }
        }
        table.clear();
        row_out[kRowSum] = static_cast<T>(sum);
        row_out[kRowRest] = static_cast<T>(rest);
        // The row's share of each column of S_c, through the entries that map into it.
        T* columns = out + 2 * rows + row_offset[r];
        for (int32_t g = chunk_slots[c]; g < chunk_slots[c + 1]; ++g) {
          double v = 0;
          if (m != kNegInf)
            for (int32_t e = slot_entries[g]; e < slot_entries[g + 1]; ++e) {
              const T z = xs[entry_column[e]] * inv_t;
              if (z != kNegInf) v += std::exp(z - m) * static_cast<double>(entry_weight[e]);
            }
          columns[g - chunk_slots[c]] = static_cast<T>(v);
        }
      }
    }
  });
}

void rescale(const ChunkPlan& plan, const Tensor& local_max, const Tensor& global_max, Tensor& partials) {
  dispatch_real(partials.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const int32_t* row_chunk = ints(plan.row_chunk);
    const int32_t* row_offset = ints(plan.row_column_offset);
    const int32_t* chunk_slots = ints(plan.chunk_slots);
    const T* lm = local_max.data<T>();
    const T* gm = global_max.data<T>();
    T* out = partials.data<T>();
    for (int64_t r = 0; r < plan.rows; ++r) {
      const int32_t c = row_chunk[r];
      if (c < 0) continue;
      // A shard whose row is all -inf holds nothing (and -inf - -inf must not become NaN).
      const T factor = lm[r] == kNegInf ? T(0) : std::exp(lm[r] - gm[r]);
      out[r * kRowPartials + kRowSum] *= factor;
      out[r * kRowPartials + kRowRest] *= factor;
      T* columns = out + 2 * plan.rows + row_offset[r];
      const int32_t width = chunk_slots[c + 1] - chunk_slots[c];
      for (int32_t i = 0; i < width; ++i) columns[i] *= factor;
    }
  });
}

void finish(const ChunkPlan& plan, const ChunkParams& p, const Tensor& global_max, const Tensor& partials,
            Tensor& row_stats, Tensor& preimage_grad, Tensor& chunk_rest_grad, Tensor& chunk_kl,
            Tensor& scratch_slots) {
  dispatch_real(partials.dtype(), [&]<typename T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T epsilon = static_cast<T>(p.epsilon);
    const int32_t* row_offset = ints(plan.row_column_offset);
    const int32_t* chunk_rows = ints(plan.chunk_rows);
    const int32_t* row_list = ints(plan.chunk_row_list);
    const int32_t* chunk_slots = ints(plan.chunk_slots);
    const int32_t* chunk_pre = ints(plan.chunk_preimage);
    const T* pre_outside = plan.preimage_outside.data<T>();
    const int32_t* pre_entries = ints(plan.preimage_entries);
    const int32_t* pre_slot = ints(plan.preimage_entry_slot);
    const T* pre_weight = plan.preimage_entry_weight.data<T>();
    const T* teacher = plan.teacher_log.data<T>();
    const T* teacher_rest = plan.teacher_log_rest.data<T>();
    const T* scale = plan.chunk_scale.data<T>();
    const T* gm = global_max.data<T>();
    const T* in = partials.data<T>();
    T* stats = row_stats.data<T>();
    T* a = scratch_slots.data<T>();
    T* h = preimage_grad.data<T>();
    T* rest_grad = chunk_rest_grad.data<T>();
    T* kl = chunk_kl.data<T>();
    const int64_t n = plan.rows;
#pragma omp parallel for if (plan.chunks > 64)
    for (int64_t c = 0; c < plan.chunks; ++c) {
      const T inv_n = scale[c];
      const int32_t s0 = chunk_slots[c], s1 = chunk_slots[c + 1];
      // Q_c: the mean over the chunk's rows of each row's projected mass, normalised by the row's global sum.
      double q_rest = 0;
      for (int32_t g = s0; g < s1; ++g) a[g] = T(0);
      for (int32_t i = chunk_rows[c]; i < chunk_rows[c + 1]; ++i) {
        const int32_t r = row_list[i];
        const T sum = in[r * kRowPartials + kRowSum];
        T* st = stats + r * kRowStats;
        st[kStatMax] = gm[r];
        st[kStatLogSum] = std::log(sum);
        q_rest += in[r * kRowPartials + kRowRest] / sum;
        const T* columns = in + 2 * n + row_offset[r];
        for (int32_t g = s0; g < s1; ++g) a[g] += columns[g - s0] / sum;  // a holds the column sums for now
      }
      const T qr = static_cast<T>(q_rest) * inv_n;
      double total = kl_term(teacher_rest[c], qr, epsilon);
      for (int32_t g = s0; g < s1; ++g) {
        const T q = a[g] * inv_n;
        total += kl_term(teacher[g], q, epsilon);
        // dKL_c / dQ_c,v, 0 where the teacher has no mass (its term is 0 whatever Q is).
        a[g] = teacher[g] == kNegInf ? T(0) : -std::exp(teacher[g]) / (q + epsilon);
      }
      const T a_rest = teacher_rest[c] == kNegInf ? T(0) : -std::exp(teacher_rest[c]) / (qr + epsilon);
      kl[c] = static_cast<T>(total);
      rest_grad[c] = inv_n * a_rest;
      // Each row's centre sum_u q_u h_u, from its own saved columns (no collective in the backward).
      for (int32_t i = chunk_rows[c]; i < chunk_rows[c + 1]; ++i) {
        const int32_t r = row_list[i];
        const T sum = in[r * kRowPartials + kRowSum];
        const T* columns = in + 2 * n + row_offset[r];
        double centre = static_cast<double>(a_rest) * in[r * kRowPartials + kRowRest] / sum;
        for (int32_t g = s0; g < s1; ++g) centre += static_cast<double>(a[g]) * columns[g - s0] / sum;
        stats[r * kRowStats + kStatCentre] = static_cast<T>(centre) * inv_n;
      }
      // h of each preimage column: its weight into each slot times that slot's derivative, the rest bucket's
      // derivative for its weight outside S_c.
      for (int32_t q = chunk_pre[c]; q < chunk_pre[c + 1]; ++q) {
        double v = static_cast<double>(pre_outside[q]) * a_rest;
        for (int32_t e = pre_entries[q]; e < pre_entries[q + 1]; ++e)
          v += static_cast<double>(pre_weight[e]) * a[pre_slot[e]];
        h[q] = static_cast<T>(v) * inv_n;
      }
    }
  });
}

void reduce_loss(const Tensor& chunk_kl, double factor, Tensor& loss) {
  dispatch_real(loss.dtype(), [&]<typename T>() {
    double total = 0;
    const T* kl = chunk_kl.data<T>();
    for (int64_t c = 0; c < chunk_kl.numel(); ++c) total += kl[c];
    loss.data<T>()[0] = static_cast<T>(total * factor);
  });
}

void backward(const Tensor& student_in, const ChunkPlan& plan, const ChunkParams& p, const Tensor& row_stats,
              const Tensor& preimage_grad, const Tensor& chunk_rest_grad, const Tensor& grad_output, double factor,
              bool accumulate, Tensor& dstudent_in) {
  const Tensor student = widen(student_in);
  OutputSlot slot(dstudent_in, accumulate);
  Tensor& dstudent = slot.get();
  RETORT_CHECK(dstudent.dtype() == student.dtype(), "chunk_distillation_loss backward: a {} gradient for {} logits",
               dtype_name(dstudent_in.dtype()), dtype_name(student_in.dtype()));
  const int64_t rows = student.size(0), vocab = student.size(1);
  // d/dx = (1/T) d/dz.
  const double coef = (grad_output.defined() ? grad_output.item() : 1.0) * factor * p.inv_temperature;
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(p.inv_temperature), c_all = static_cast<T>(coef);
    const int32_t* row_chunk = ints(plan.row_chunk);
    const int32_t* chunk_pre = ints(plan.chunk_preimage);
    const int32_t* pre_column = ints(plan.preimage_column);
    const T* h_pre = preimage_grad.data<T>();
    const T* rest_grad = chunk_rest_grad.data<T>();
    const T* column_weight = plan.column_weight.data<T>();
#pragma omp parallel if (worth_threads(rows, vocab))
    {
      PreimageTable table(vocab);
#pragma omp for
      for (int64_t r = 0; r < rows; ++r) {
        T* g = dstudent.data<T>() + r * vocab;
        const int32_t c = row_chunk[r];
        if (c < 0) {
          if (!accumulate) std::fill_n(g, vocab, T(0));
          continue;
        }
        const T* xs = student.data<T>() + r * vocab;
        const T* st = row_stats.data<T>() + r * kRowStats;
        const T m = st[kStatMax], log_sum = st[kStatLogSum], centre = st[kStatCentre], h_rest = rest_grad[c];
        table.mark(pre_column, chunk_pre[c], chunk_pre[c + 1]);
        for (int64_t j = 0; j < vocab; ++j) {
          const T q = std::exp((xs[j] * inv_t - m) - log_sum);
          const int32_t at = table.at(j);
          const T h = at >= 0 ? h_pre[at] : column_weight[j] * h_rest;
          const T v = c_all * q * (h - centre);
          g[j] = accumulate ? g[j] + v : v;
        }
        table.clear();
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::chunk::cpu
