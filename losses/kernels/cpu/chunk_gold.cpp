// The CPU passes of the vocab-parallel gold loss (chunk_gold_kernels.h). z = x / T in the compute type (float, or
// double for f64), sums in double. A chunk's LS row is built once in a per-thread buffer of the shard's width; its
// top m uncommon values come from a partial sort of (value, global id) pairs, ties to the smaller id.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/kernels/cpu/cpu_common.h"
#include "losses/kernels/chunk_gold_kernels.h"
#include "losses/kernels/cpu/loss_rows.h"

namespace retort::losses::kernels::gold::cpu {

using cpu_rows::worth_threads;
using retort::kernels::cpu::dispatch_real;
using retort::kernels::cpu::OutputSlot;
using retort::kernels::cpu::widen;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double xlogy_term(double r, double log_q) {
  return r == kNegInf ? 0.0 : std::exp(r) * (r - log_q);
}
}  // namespace

void row_stats(const Tensor& student_in, const GoldPlan& plan, Tensor& local_max, Tensor& partial_sum) {
  const Tensor student = widen(student_in);
  const int64_t rows = student.size(0), vocab = student.size(1);
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(plan.inv_temperature);
#pragma omp parallel for if (worth_threads(rows, vocab))
    for (int64_t r = 0; r < rows; ++r) {
      T m = -std::numeric_limits<T>::infinity();
      double s = 0;
      if (plan.row_chunk[static_cast<size_t>(r)] >= 0) {
        const T* xs = student.data<T>() + r * vocab;
        for (int64_t j = 0; j < vocab; ++j) m = std::max(m, xs[j] * inv_t);
        if (m != -std::numeric_limits<T>::infinity())
          for (int64_t j = 0; j < vocab; ++j) s += std::exp(xs[j] * inv_t - m);
      }
      local_max.data<T>()[r] = m;
      partial_sum.data<T>()[r] = static_cast<T>(s);
    }
  });
}

void chunk_pass(const Tensor& student_in, const GoldPlan& plan, const Tensor& lse, Tensor& candidates) {
  const Tensor student = widen(student_in);
  const int64_t vocab = student.size(1), width = candidate_columns(plan.top);
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(plan.inv_temperature);
    const T* row_lse = lse.data<T>();
#pragma omp parallel if (plan.chunks > 1 && plan.chunks * vocab > 16384)
    {
      std::vector<double> ls(static_cast<size_t>(vocab));
      std::vector<std::pair<double, int64_t>> uncommon;
#pragma omp for
      for (int64_t c = 0; c < plan.chunks; ++c) {
        std::fill(ls.begin(), ls.end(), 0.0);
        const double inv_n = plan.chunk_scale[static_cast<size_t>(c)];
        for (int32_t i = plan.chunk_rows[c]; i < plan.chunk_rows[c + 1]; ++i) {
          const int64_t r = plan.rows_list[static_cast<size_t>(i)];
          const T* xs = student.data<T>() + r * vocab;
          for (int64_t j = 0; j < vocab; ++j)
            ls[static_cast<size_t>(j)] += static_cast<double>(xs[j] * inv_t - row_lse[r]);
        }
        for (double& v : ls) v *= inv_n;
        // The common KL: the special pairs one by one, every other common id against the unlisted teacher value.
        const int32_t s0 = plan.special_offsets[c], s1 = plan.special_offsets[c + 1];
        double common = 0, others = 0;
        int32_t s = s0;
        const double u = plan.unlisted[static_cast<size_t>(c)];
        uncommon.clear();
        for (int64_t j = 0; j < vocab; ++j) {
          if (!plan.common[static_cast<size_t>(j)]) {
            uncommon.push_back({std::exp(ls[static_cast<size_t>(j)]), plan.vocab_start + j});
            continue;
          }
          if (s < s1 && plan.special_column[static_cast<size_t>(s)] == j) {
            common += xlogy_term(plan.special_teacher[static_cast<size_t>(s)], ls[static_cast<size_t>(j)]);
            ++s;
          } else {
            others += u - ls[static_cast<size_t>(j)];
          }
        }
        common += u == kNegInf ? 0.0 : std::exp(u) * others;
        const size_t keep = std::min(uncommon.size(), static_cast<size_t>(plan.top));
        auto better = [](const auto& a, const auto& b) {
          return a.first > b.first || (a.first == b.first && a.second < b.second);
        };
        std::partial_sort(uncommon.begin(), uncommon.begin() + static_cast<ptrdiff_t>(keep), uncommon.end(), better);
        T* out = candidates.data<T>() + c * width;
        for (int64_t i = 0; i < plan.top; ++i) {
          const bool has = static_cast<size_t>(i) < keep;
          out[i] = static_cast<T>(has ? uncommon[static_cast<size_t>(i)].first : -1.0);
          out[plan.top + i] = static_cast<T>(has ? static_cast<double>(uncommon[static_cast<size_t>(i)].second) : -1.0);
        }
        out[2 * plan.top] = static_cast<T>(common);
      }
    }
  });
}

void backward(const Tensor& student_in, const GoldPlan& plan, const Tensor& lse,
              const std::vector<int32_t>& winner_offsets, const std::vector<int32_t>& winner_column,
              const std::vector<double>& winner_grad, const std::vector<double>& chunk_g, double grad_output,
              double factor, bool accumulate, Tensor& dstudent_in) {
  const Tensor student = widen(student_in);
  OutputSlot slot(dstudent_in, accumulate);
  Tensor& dstudent = slot.get();
  const int64_t rows = student.size(0), vocab = student.size(1);
  // d/dx = (1/T) d/dz.
  const double coef = grad_output * factor * plan.inv_temperature;
  dispatch_real(student.dtype(), [&]<typename T>() {
    const T inv_t = static_cast<T>(plan.inv_temperature);
    const T* row_lse = lse.data<T>();
#pragma omp parallel if (worth_threads(rows, vocab))
    {
      std::vector<double> g(static_cast<size_t>(vocab));
#pragma omp for
      for (int64_t r = 0; r < rows; ++r) {
        T* out = dstudent.data<T>() + r * vocab;
        const int32_t c = plan.row_chunk[static_cast<size_t>(r)];
        if (c < 0) {
          if (!accumulate) std::fill_n(out, vocab, T(0));
          continue;
        }
        // g_j = dGold_c / dLS_c,j: -exp(R) on the common ids, sign(a - b) a on this rank's winners, 0 elsewhere.
        const double u = plan.unlisted[static_cast<size_t>(c)];
        const double common_g = u == kNegInf ? 0.0 : -std::exp(u);
        for (int64_t j = 0; j < vocab; ++j)
          g[static_cast<size_t>(j)] = plan.common[static_cast<size_t>(j)] ? common_g : 0.0;
        for (int32_t s = plan.special_offsets[c]; s < plan.special_offsets[c + 1]; ++s) {
          const double rv = plan.special_teacher[static_cast<size_t>(s)];
          g[static_cast<size_t>(plan.special_column[static_cast<size_t>(s)])] = rv == kNegInf ? 0.0 : -std::exp(rv);
        }
        for (int32_t w = winner_offsets[c]; w < winner_offsets[c + 1]; ++w)
          g[static_cast<size_t>(winner_column[static_cast<size_t>(w)])] = winner_grad[static_cast<size_t>(w)];
        const double inv_n = plan.chunk_scale[static_cast<size_t>(c)], big_g = chunk_g[static_cast<size_t>(c)];
        const T* xs = student.data<T>() + r * vocab;
        for (int64_t j = 0; j < vocab; ++j) {
          const double q = std::exp(static_cast<double>(xs[j] * inv_t - row_lse[r]));
          const T v = static_cast<T>(coef * inv_n * (g[static_cast<size_t>(j)] - q * big_g));
          out[j] = accumulate ? out[j] + v : v;
        }
      }
    }
  });
  slot.finish();
}

}  // namespace retort::losses::kernels::gold::cpu
