#pragma once
// The top-k distillation losses as a loss family of loss_family_harness.h: problems over a GLOBAL vocabulary
// (student logits, full teacher logits and the top-k cache made from them), the float64 dense reference written
// from full-vocabulary softmaxes, how the op is called, its tolerances, and the scenarios of every check. A
// case's jobs are its divergences at T 1 and 2.5 with and without the CE mix, run as one batch in the same group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "distribution_loss_family.h"
#include "loss_family_harness.h"
#include "losses/topk_distillation.h"
#include "torch_oracle.h"

namespace retort::loss_testing {

namespace topk {

using losses::Reduction;
using Divergence = losses::TopkDivergence;

inline const std::vector<Divergence>& all_divergences() {
  static const std::vector<Divergence> all = {Divergence::ForwardKLRenormalized, Divergence::ForwardKLRest,
                                              Divergence::ReverseKL, Divergence::Mixed};
  return all;
}

inline std::string divergence_name(Divergence d) {
  switch (d) {
    case Divergence::ForwardKLRenormalized:
      return "forward_kl_renormalized";
    case Divergence::ForwardKLRest:
      return "forward_kl_rest";
    case Divergence::ReverseKL:
      return "reverse_kl";
    case Divergence::Mixed:
      return "mixed";
    case Divergence::ForwardKLSampled:  // tested on its own: tests/losses/test_sampled_kd_loss.cpp
      return "forward_kl_sampled";
  }
  return "?";
}

inline bool rest_bucket(Divergence d) {
  return d != Divergence::ForwardKLRenormalized;
}

// One scenario; the global vocabulary is vocab_local x tp, so every tp gets shards of the same odd width.
struct Case {
  std::string name;
  int64_t rows = 24;
  int64_t vocab_local = 37;
  int64_t k = 9;       // clamped to the global vocabulary
  double scale = 3.0;  // standard deviation of the student logits; the teacher is correlated with it (0.6)
  losses::TopkDistillationOptions options;  // reduction, normalizer, ignore_index; the rest is set per job
  int mask_every = 4;                       // labels: rows i % mask_every == 1 are ignore_index; 0: none; -1: every row
  bool labels = true;                       // false: no labels (and no CE mix)
  bool mask = false;                        // a separate mask too: rows i % 5 == 2 are 0
  bool teacher_full_mass = false;   // the teacher's tail is -inf: the k values hold all the mass (p_rest -> clamp)
  double student_top_boost = 0;     // added to the student's logits on S: q_rest tiny when large
  bool inf_logprobs = false;        // some cached log-probs are -inf (p_j = 0), the student's logit there too
  bool inf_logprobs_only = false;   // ... with a finite student logit there (the reverse KL is then +inf)
  bool inf_student_tail = false;    // some student logits outside S are -inf
  bool inf_student_on_top = false;  // some student logits on S with p_j > 0 are -inf: the forward KLs are +inf
  bool one_shard = false;           // every index on the first shard (ids < vocab_local)
  bool three_d = false;             // logits [2, rows / 2, V_local]
  DType cache_dtype = DType::F32;   // the cached log-probs' storage (the f64 runs use f64)
  std::vector<Divergence> divergences = all_divergences();
  bool with_temperature = true;    // also T = 2.5 (cache at T for the rest-bucket kinds), with the T^2 scaling
  bool without_t_squared = false;  // ... and without it
  bool with_ce = true;             // also kd_ratio 0.7 (when there are labels)
};

inline bool masked_by_label(const Case& c, int64_t row) {
  return c.mask_every < 0 || (c.mask_every > 0 && row % c.mask_every == 1);
}
inline bool masked_by_mask(const Case& c, int64_t row) {
  return c.mask && row % 5 == 2;
}

struct Problem {
  int64_t rows = 0, vocab = 0, vocab_local = 0, k = 0;
  std::vector<double> student, teacher;  // [rows, vocab]: logits
  std::vector<int32_t> indices;          // [rows, k]
  std::vector<double> logprobs;          // [rows, k]: log_softmax(teacher / cache_temperature) at the indices
  std::vector<int32_t> labels, mask;     // [rows]
  double cache_temperature = 1.0;
};

// Deterministic per (case, tp, cache temperature); the student and teacher logits do not depend on the cache
// temperature, so one problem's cache at T = 1 and at T = 2.5 describe the same teacher.
inline Problem make_problem(const Case& c, int tp, double cache_temperature = 1.0, uint64_t seed = 97531) {
  Problem p;
  p.rows = c.rows;
  p.vocab_local = c.vocab_local;
  p.vocab = c.vocab_local * tp;
  p.k = std::min(c.k, c.one_shard ? c.vocab_local : p.vocab);
  p.cache_temperature = cache_temperature;
  std::mt19937_64 rng(seed + std::hash<std::string>{}(c.name) + static_cast<uint64_t>(tp));
  std::normal_distribution<double> normal(0.0, c.scale);
  const size_t n = static_cast<size_t>(p.rows * p.vocab);
  p.student.resize(n);
  p.teacher.resize(n);
  for (size_t i = 0; i < n; ++i) {
    p.student[i] = normal(rng);
    p.teacher[i] = 0.6 * p.student[i] + 0.8 * normal(rng);
  }
  p.indices.resize(static_cast<size_t>(p.rows * p.k));
  p.logprobs.resize(static_cast<size_t>(p.rows * p.k));
  p.labels.resize(static_cast<size_t>(p.rows));
  p.mask.assign(static_cast<size_t>(p.rows), 1);
  for (int64_t i = 0; i < p.rows; ++i) {
    double* x = p.student.data() + i * p.vocab;
    double* t = p.teacher.data() + i * p.vocab;
    // S: the teacher's top k (over the first shard only with one_shard), ties broken by id.
    const int64_t span = c.one_shard ? p.vocab_local : p.vocab;
    std::vector<int32_t> order(static_cast<size_t>(span));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return t[a] > t[b]; });
    std::vector<bool> in_top(static_cast<size_t>(p.vocab), false);
    for (int64_t s = 0; s < p.k; ++s) in_top[order[s]] = true;
    if (c.teacher_full_mass)
      for (int64_t j = 0; j < p.vocab; ++j)
        if (!in_top[j]) t[j] = -kInf;
    if (c.inf_student_tail)
      for (int64_t j = 0; j < p.vocab; ++j)
        if (!in_top[j] && rng() % 4 == 0) x[j] = -kInf;
    for (int64_t j = 0; j < p.vocab; ++j)
      if (in_top[j]) x[j] += c.student_top_boost;
    // The cache: log_softmax(t / T_cache) over the FULL vocabulary, at S, in the teacher's order.
    double m = -kInf, s = 0;
    for (int64_t j = 0; j < p.vocab; ++j) m = std::max(m, t[j] / cache_temperature);
    for (int64_t j = 0; j < p.vocab; ++j) s += std::exp(t[j] / cache_temperature - m);
    for (int64_t slot = 0; slot < p.k; ++slot) {
      const int32_t j = order[slot];
      p.indices[i * p.k + slot] = j;
      double l = (t[j] / cache_temperature - m) - std::log(s);
      if ((c.inf_logprobs || c.inf_logprobs_only) && slot > 0 && rng() % 3 == 0) l = -kInf;
      p.logprobs[i * p.k + slot] = l;
      // A student -inf where the teacher has mass (slot 0 always has mass).
      if (c.inf_student_on_top && slot == 0 && i % 2 == 0) x[j] = -kInf;
      // Both sides -inf: the term is 0 for every divergence.
      if (c.inf_logprobs && l == -kInf) x[j] = -kInf;
    }
    // A label on a finite student logit (a -inf one would make every CE mix +inf).
    int64_t label = (i * 7) % p.vocab;
    while (x[label] == -kInf) label = (label + 1) % p.vocab;
    p.labels[i] = masked_by_label(c, i) ? c.options.ignore_index : static_cast<int32_t>(label);
    if (masked_by_mask(c, i)) p.mask[i] = 0;
  }
  return p;
}

inline double loss_scale_of(const losses::TopkDistillationOptions& o) {
  return o.scale_by_t_squared ? o.temperature * o.temperature : 1.0;
}

// log sum exp of the given values (float64; -inf for none).
inline double log_sum_exp(const std::vector<double>& v) {
  double m = -kInf;
  for (double a : v) m = std::max(m, a);
  if (m == -kInf) return -kInf;
  double s = 0;
  for (double a : v) s += std::exp(a - m);
  return m + std::log(s);
}

// float64, from the definitions, with the categories written out: q = softmax(x / T) over the full vocabulary;
// the teacher's categories are p_j = e^{l_j} on S plus p_rest = 1 - e^{min(lse_S l, -1e-7)} (the reference's
// clamp), the student's q_j on S plus q_rest = sum of q_j off S (summed over the tail directly, in logs);
// renormalized: p^ = softmax_S(l / T) (l as cached at T = 1) against q^ = q / sum_S q. The gradient wrt z comes
// from the chain rule through the softmax, dL/dz_j = q_j (G_c(j) - sum_c q_c G_c) with G_c = dL/dq_c
// (forward: -p_c / q_c, reverse: log(q_c / p_c) + 1), and the CE from log_softmax(x) at temperature 1.
inline Reference dense_reference(const Problem& p, const std::vector<double>& student,
                                 const std::vector<double>& logprobs, const std::vector<bool>& valid,
                                 const losses::TopkDistillationOptions& o, bool use_labels) {
  const double T = o.temperature, scale = loss_scale_of(o), kd = o.kd_ratio, w = o.forward_weight;
  const bool tempered_cache = !o.targets_at_temperature;  // renormalized only: l / T
  Reference ref;
  ref.grad.assign(student.size(), 0.0);
  double total = 0;
  int64_t count = 0;
  std::vector<double> lq(static_cast<size_t>(p.vocab)), lq_raw(static_cast<size_t>(p.vocab));
  auto log_softmax = [&](const double* x, double inv_t, std::vector<double>& out) {
    double m = -kInf;
    for (int64_t j = 0; j < p.vocab; ++j) m = std::max(m, x[j] * inv_t);
    double s = 0;
    for (int64_t j = 0; j < p.vocab; ++j) s += std::exp(x[j] * inv_t - m);
    for (int64_t j = 0; j < p.vocab; ++j) out[j] = (x[j] * inv_t - m) - std::log(s);
  };
  for (int64_t i = 0; i < p.rows; ++i) {
    if (!valid[i]) continue;
    ++count;
    const double* x = student.data() + i * p.vocab;
    const int32_t* ids = p.indices.data() + i * p.k;
    const double* l = logprobs.data() + i * p.k;
    double* grad = ref.grad.data() + i * p.vocab;
    log_softmax(x, 1.0 / T, lq);
    std::vector<int> slot_of(static_cast<size_t>(p.vocab), -1);
    for (int64_t s = 0; s < p.k; ++s) slot_of[ids[s]] = static_cast<int>(s);
    std::vector<double> tail;
    for (int64_t j = 0; j < p.vocab; ++j)
      if (slot_of[j] < 0) tail.push_back(lq[j]);
    const double lq_rest = log_sum_exp(tail);  // -inf for an empty tail
    double kd_loss = 0;
    std::vector<double> dz(static_cast<size_t>(p.vocab), 0.0);
    auto add_forward_rest = [&](double weight) {
      std::vector<double> ls(l, l + p.k);
      const double lp_rest = std::log(-std::expm1(std::min(log_sum_exp(ls), -1e-7)));
      const double p_rest = std::exp(lp_rest);
      double div = 0, centre = 0;  // centre = sum_c q_c G_c = -(sum of the teacher's category masses)
      for (int64_t s = 0; s < p.k; ++s) {
        const double pj = std::exp(l[s]), lqj = lq[ids[s]];
        if (pj > 0) div += lqj == -kInf ? kInf : pj * (l[s] - lqj);
        centre -= pj;
      }
      div += p_rest * (lp_rest - std::max(lq_rest, -100.0));
      centre -= p_rest;
      for (int64_t j = 0; j < p.vocab; ++j) {
        const double qj = std::exp(lq[j]);
        // q_j G_c(j): -p_j on S; -p_rest q_j / q_rest off S
        const double qg =
            slot_of[j] >= 0 ? -std::exp(l[slot_of[j]]) : (lq[j] == -kInf ? 0.0 : -p_rest * std::exp(lq[j] - lq_rest));
        dz[j] += weight * (qg - qj * centre);
      }
      kd_loss += weight * div;
    };
    auto add_reverse = [&](double weight) {
      std::vector<double> ls(l, l + p.k);
      const double lp_rest = std::log(-std::expm1(std::min(log_sum_exp(ls), -1e-7)));
      const double lq_rest_c = std::max(lq_rest, -100.0);
      double div = 0;
      for (int64_t s = 0; s < p.k; ++s) {
        const double lqj = lq[ids[s]];
        if (lqj != -kInf) div += l[s] == -kInf ? kInf : std::exp(lqj) * (lqj - l[s]);
      }
      if (!tail.empty() && lq_rest != -kInf) div += std::exp(lq_rest_c) * (lq_rest_c - lp_rest);
      // G_c - centre = log(q_c / p_c) + 1 - (L + 1)
      for (int64_t j = 0; j < p.vocab; ++j) {
        const double qj = std::exp(lq[j]);
        if (qj == 0) continue;
        const double lc = slot_of[j] >= 0 ? lq[j] - l[slot_of[j]] : lq_rest_c - lp_rest;
        dz[j] += weight * qj * (lc - div);
      }
      kd_loss += weight * div;
    };
    switch (o.divergence) {
      case Divergence::ForwardKLRenormalized: {
        std::vector<double> lt(static_cast<size_t>(p.k)), lqs(static_cast<size_t>(p.k));
        for (int64_t s = 0; s < p.k; ++s) lt[s] = tempered_cache ? l[s] / T : l[s];
        for (int64_t s = 0; s < p.k; ++s) lqs[s] = lq[ids[s]];
        const double lse_t = log_sum_exp(lt), lse_q = log_sum_exp(lqs);
        double div = 0, mass = 0;
        for (int64_t s = 0; s < p.k; ++s) {
          const double lph = lt[s] - lse_t, lqh = lqs[s] - lse_q, ph = std::exp(lph);
          mass += ph;
          if (ph > 0) div += lqh == -kInf ? kInf : ph * (lph - lqh);
        }
        // dL/dz_j = sum(p^) q^_j - p^_j on S (q^ = q / sum_S q), 0 off S
        for (int64_t s = 0; s < p.k; ++s) {
          const double lqh = lqs[s] - lse_q;
          dz[ids[s]] = mass * (lqs[s] == -kInf ? 0.0 : std::exp(lqh)) - std::exp(lt[s] - lse_t);
        }
        kd_loss = div;
        break;
      }
      case Divergence::ForwardKLRest:
        add_forward_rest(1.0);
        break;
      case Divergence::ReverseKL:
        add_reverse(1.0);
        break;
      case Divergence::Mixed:
        add_forward_rest(w);
        add_reverse(1 - w);
        break;
      case Divergence::ForwardKLSampled:  // not a family member (its targets are weights, not log-probs)
        ADD_FAILURE() << "the sampled forward KL has its own reference (test_sampled_kd_loss.cpp)";
        break;
    }
    double row = 0;
    if (kd != 0) {
      row += kd * scale * kd_loss;
      for (int64_t j = 0; j < p.vocab; ++j) grad[j] += kd * scale / T * dz[j];
    }
    if (kd != 1 && use_labels) {
      log_softmax(x, 1.0, lq_raw);
      const int32_t y = p.labels[i];
      row += (1 - kd) * -lq_raw[y];
      for (int64_t j = 0; j < p.vocab; ++j) grad[j] += (1 - kd) * (std::exp(lq_raw[j]) - (j == y ? 1.0 : 0.0));
    }
    total += row;
  }
  const double denom = denominator_of(o, count);
  ref.loss = total / denom;
  for (double& g : ref.grad) g /= denom;
  ref.grad_unit = (kd * scale / T + (1 - kd)) / denom;
  return ref;
}

inline std::vector<bool> valid_rows(const Case& c, const Problem& p) {
  std::vector<bool> valid(static_cast<size_t>(p.rows));
  for (int64_t i = 0; i < p.rows; ++i)
    valid[i] = !(c.labels && p.labels[i] == c.options.ignore_index) && !(c.mask && p.mask[i] == 0);
  return valid;
}

// The reference for the values the op actually sees: the student rounded to its storage dtype, the cache to
// its own, then (as the CPU path does) both to the student's compute precision.
inline Reference reference_for(const Case& c, const Problem& p, const losses::TopkDistillationOptions& o, DType student,
                               DType cache) {
  std::vector<double> l = stored(p.logprobs, cache);
  if (student != DType::F64) l = stored(l, DType::F32);
  return dense_reference(p, stored(p.student, student), l, valid_rows(c, p), o, c.labels);
}

inline losses::TopkTargets targets_of(const Case& c, const Problem& p, const Shape& leading, DType cache,
                                      Device device) {
  losses::TopkTargets t;
  Shape with_k = leading;
  with_k.push_back(p.k);
  t.indices = Tensor::from_ints(p.indices, with_k, device);
  t.logprobs = Tensor::from_doubles(p.logprobs, with_k, cache, device);
  if (c.labels) t.labels = Tensor::from_ints(p.labels, leading, device);
  if (c.mask) t.mask = Tensor::from_ints(p.mask, leading, device);
  return t;
}

inline losses::TopkDistillationOptions options_for(Divergence d, double kd_ratio = 0.8) {
  losses::TopkDistillationOptions o;
  o.divergence = d;
  o.kd_ratio = kd_ratio;
  return o;
}

// The case the fused-API and group checks use: a 53-column vocabulary, k 11, -inf cached log-probs and student
// tail entries.
inline Case fused_case() {
  return make_case<Case>("fused", [](Case& c) {
    c.vocab_local = 53;
    c.k = 11;
    c.inf_logprobs = true;
    c.inf_student_tail = true;
  });
}

// The top-k cache stored as `cache` on the CPU, for the whole (tp 1) problem.
inline losses::TopkTargets targets_for(const Case& c, const Problem& p, DType cache = DType::F32) {
  return targets_of(c, p, {p.rows}, cache, Device::cpu());
}

// The gradient may overwrite the logits themselves (each column is read before it is written): the fused
// trainer's way to save a [N, V/tp] buffer. In place and into a separate buffer give the same bits, for every
// divergence (kd_ratio 0.8) and each of `dtypes` on `device`.
inline void expect_backward_in_place_over_the_logits(const Case& c, const std::vector<DType>& dtypes, Device device) {
  const Problem p = make_problem(c, 1);
  for (Divergence d : all_divergences()) {
    for (DType dtype : dtypes) {
      const Tensor student = Tensor::from_doubles(p.student, {p.rows, p.vocab}, dtype, device);
      const auto forward =
          losses::topk_distillation_forward(student, targets_of(c, p, {p.rows}, DType::F32, device), options_for(d));
      Tensor expected = Tensor::empty(student.shape(), dtype, device);
      losses::topk_distillation_backward(student, forward.saved, Tensor(), expected);
      Tensor in_place = student.clone();
      losses::topk_distillation_backward(in_place, forward.saved, Tensor(), in_place);
      EXPECT_EQ(in_place.to_doubles(), expected.to_doubles()) << divergence_name(d) << " " << dtype_name(dtype);
    }
  }
}

}  // namespace topk

struct TopkDistillationFamily {
  using Case = topk::Case;
  using Problem = topk::Problem;
  using Options = losses::TopkDistillationOptions;
  using Inputs = losses::TopkTargets;
  using Log = DistributionLossFamily::Log;  // the distribution losses' log

  static constexpr const char* kTypeName = "TopkDistillation";
  static constexpr const char* kName = "topk";
  static constexpr const char* kLogPrefix = "topk ";
  static constexpr const char* kSideInput = "cache";
  static constexpr double kF32BufferTolerance = 4e-6;

  // ---- problems ----

  // The rest-bucket kinds at T != 1 read a cache made at T; the renormalized KL tempers the T = 1 cache.
  static Problem problem_for(const Case& c, int tp, const Options& o) {
    return topk::make_problem(c, tp, o.targets_at_temperature ? o.temperature : 1.0);
  }
  // Every divergence the case covers, at T = 1 and (with_temperature) T = 2.5 with the T^2 scaling (and without
  // it: without_t_squared), and with kd_ratio 0.7 (with_ce, when there are labels).
  static CaseJobs<TopkDistillationFamily> jobs_for(const Case& c, int tp) {
    CaseJobs<TopkDistillationFamily> out;
    std::map<double, const Problem*> problems;  // by cache temperature
    problems[1.0] = &out.add_problem(topk::make_problem(c, tp, 1.0));
    if (c.with_temperature) problems[2.5] = &out.add_problem(topk::make_problem(c, tp, 2.5));
    const std::vector<double> temperatures =
        c.with_temperature ? std::vector<double>{1.0, 2.5} : std::vector<double>{1.0};
    const std::vector<double> ratios = c.with_ce && c.labels ? std::vector<double>{1.0, 0.7} : std::vector<double>{1.0};
    for (topk::Divergence d : c.divergences)
      for (double t : temperatures)
        for (bool sq : t != 1.0 && c.without_t_squared ? std::vector<bool>{true, false} : std::vector<bool>{true})
          for (double ratio : ratios) {
            Options o = c.options;
            o.divergence = d;
            o.temperature = t;
            o.scale_by_t_squared = sq;
            o.kd_ratio = ratio;
            o.forward_weight = 0.3;
            o.targets_at_temperature = t != 1.0 && topk::rest_bucket(d);
            out.add_job(o, *problems.at(o.targets_at_temperature ? t : 1.0));
          }
    return out;
  }
  static const std::vector<double>& logits(const Problem& p) { return p.student; }
  static std::vector<bool> valid_rows(const Case& c, const Problem& p) { return topk::valid_rows(c, p); }
  // (row, global column) of finite student logits, every fourth row: the first two members of S and three
  // other columns, both shards.
  static std::vector<std::pair<int64_t, int64_t>> fd_probes(const Problem& p) {
    std::vector<std::pair<int64_t, int64_t>> probes;
    for (int64_t i = 0; i < p.rows; i += 4) {
      for (int64_t s = 0; s < std::min<int64_t>(p.k, 2); ++s) probes.emplace_back(i, p.indices[i * p.k + s]);
      for (int64_t n = 0; n < 3; ++n) probes.emplace_back(i, (i * 31 + n * 17 + 7) % p.vocab);
    }
    std::erase_if(probes, [&](const auto& pr) { return !std::isfinite(p.student[pr.first * p.vocab + pr.second]); });
    return probes;
  }

  // ---- the op ----

  static DType side_dtype(const Case& c, DType dtype) { return dtype == DType::F64 ? DType::F64 : c.cache_dtype; }
  // The cache (ids, log-probs stored as `side`, labels, mask): the same on every rank.
  static Inputs inputs(const Case& c, const Problem& p, int, const Shape& logits_shape, DType side,
                       const Placement& at) {
    const Shape leading(logits_shape.begin(), logits_shape.end() - 1);
    return topk::targets_of(c, p, leading, side, at.inputs_device());
  }
  static Tensor loss(const Tensor& student, const Inputs& targets, const Options& o) {
    return losses::topk_distillation_loss(student, targets, o);
  }
  static losses::TopkDistillationForward forward(const Tensor& student, const Inputs& targets, const Options& o) {
    return losses::topk_distillation_forward(student, targets, o);
  }
  static void backward(const Tensor& student, const Inputs&, const losses::TopkDistillationSaved& saved,
                       const Tensor& grad_output, Tensor& buffer, bool accumulate) {
    losses::topk_distillation_backward(student, saved, grad_output, buffer, accumulate);
  }

  // ---- checking ----

  static Reference reference_for(const Case& c, const Problem& p, const Options& o, DType dtype, DType side) {
    return topk::reference_for(c, p, o, dtype, side);
  }
  // Stated once for every comparison against the float64 reference. The gradient error is relative to
  // max(max |g|, the gradient of one unit of probability) (grad_error). f64: rounding only. f32: float32 math on
  // exact inputs; with logits x1000 the divergences are sums of terms of ~1e3 and log q_j = (z_j - m) - log S
  // carries the float32 ulp of ~1e3. bf16: the gradient is stored in bf16 (unit roundoff 2^-8 = 3.9e-3). The GPU
  // sums exp in float with running maxima (the CPU in double).
  static Tolerance tolerance_for(DType dtype, const Case& c, Device device) {
    const bool huge = c.scale >= 1000, gpu = device.is_cuda();
    const Tolerance f32 = {huge ? 1e-5 : gpu ? 4e-6 : 2e-6, huge ? 1e-3 : gpu ? 1e-5 : 4e-6};
    const Tolerance bf16 = {huge ? 1e-5 : gpu ? 4e-6 : 2e-6, huge ? 5e-3 : 4e-3};
    return tolerance_by_dtype(dtype, f32, bf16);
  }
  // One MAX all-reduce [rows, 3] and one packed SUM [rows, 7].
  static std::pair<Shape, Shape> collective_shapes(const Problem& p, const Options&) {
    return {Shape{p.rows, 3}, Shape{p.rows, 7}};
  }
  static std::string job_label(const Options& o) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " T=%g%s kd=%g", o.temperature, o.scale_by_t_squared ? " x T^2" : "", o.kd_ratio);
    return topk::divergence_name(o.divergence) + buf;
  }
  static std::string job_tag(const Options& o) { return topk::divergence_name(o.divergence); }

  // ---- scenarios ----

  // distillation.md's and losses.md's edge cases.
  static std::vector<Case> reference_cases() {
    CaseList<Case> cases;
    cases.add("masked_mean", [](Case& c) { c.without_t_squared = true; });
    cases.add("no_labels_separate_mask", [](Case& c) {
      c.labels = false;
      c.mask = true;
    });
    cases.add("labels_and_mask_sum", [](Case& c) {
      c.mask = true;
      c.options.reduction = topk::Reduction::Sum;
    });
    cases.add("normalizer_3d", [](Case& c) {
      c.options.normalizer = 1000.0;
      c.three_d = true;
    });
    cases.add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
    cases.add("bf16_cache", [](Case& c) { c.cache_dtype = DType::BF16; });
    cases.add("wide_shard_1031_k64", [](Case& c) {
      c.vocab_local = 1031;  // odd and not a multiple of any block size
      c.rows = 6;
      c.k = 64;
    });
    cases.add("teacher_tail_mass_zero", [](Case& c) { c.teacher_full_mass = true; });
    cases.add("student_mass_on_top", [](Case& c) { c.student_top_boost = 30; });  // q_rest ~ e^-30
    cases.add("logits_x1000", [](Case& c) { c.scale = 3000; });
    cases.add("student_mass_on_top_x1000", [](Case& c) {
      c.scale = 3000;
      c.student_top_boost = 30000;  // q_rest underflows every float: only the masked sum keeps it
    });
    cases.add("minus_inf_logprobs_and_student_tail", [](Case& c) {
      c.inf_logprobs = true;
      c.inf_student_tail = true;
    });
    cases.add("minus_inf_logprobs_student_finite", [](Case& c) {
      c.inf_logprobs_only = true;  // p_j = 0 under a finite student logit: the forward KLs drop the term
      c.divergences = {topk::Divergence::ForwardKLRenormalized, topk::Divergence::ForwardKLRest};
    });
    cases.add("infinite_forward_kl", [](Case& c) {
      c.inf_student_on_top = true;  // teacher mass on a student -inf: +inf, with a finite gradient
      c.divergences = {topk::Divergence::ForwardKLRenormalized, topk::Divergence::ForwardKLRest};
      c.with_ce = false;
    });
    cases.add("indices_on_one_shard", [](Case& c) { c.one_shard = true; });
    cases.add("k_over_shard", [](Case& c) {
      c.vocab_local = 8;
      c.k = 13;  // k > V / tp at tp 2 and 4; k = V (an empty rest bucket) at tp 1
    });
    cases.add("all_masked", [](Case& c) { c.mask_every = -1; });
    cases.add("single_row", [](Case& c) {
      c.rows = 1;
      c.mask_every = 0;
    });
    return cases.list();
  }

  // tp 8: the four divergences at T 1 and 2.5 with the CE mix on the plain masked case (f32), and k = 13 over
  // shards of 8 columns (bf16).
  static std::vector<std::pair<Case, DType>> tp8_runs() {
    Case masked = case_named(reference_cases(), "masked_mean");
    masked.without_t_squared = false;
    Case k_over_shard = case_named(reference_cases(), "k_over_shard");
    k_over_shard.with_ce = false;
    return {{masked, DType::F32}, {k_over_shard, DType::BF16}};
  }

  // Every divergence of a scenario at T = 1 with kd_ratio 1 and at T = 2.5 with kd_ratio `ratio` (the CE mix when
  // < 1). Probes cover members of S and the tail; -inf entries, masked rows, a teacher whose k values hold all the
  // mass (so W = sum p + p_rest != 1 exactly) and a student with almost all its mass on S.
  static std::vector<FiniteDifferenceScenario<TopkDistillationFamily>> finite_difference_scenarios() {
    auto scenario = [](std::string name, const Case& c, double ratio) {
      FiniteDifferenceScenario<TopkDistillationFamily> s{std::move(name), {}};
      for (topk::Divergence d : c.divergences)
        for (const auto& [t, kd] : {std::pair{1.0, 1.0}, std::pair{2.5, ratio}}) {
          Options o = c.options;
          o.divergence = d;
          o.temperature = t;
          o.kd_ratio = kd;
          o.forward_weight = 0.3;
          o.targets_at_temperature = t != 1.0 && topk::rest_bucket(d);
          s.runs.emplace_back(c, o);
        }
      return s;
    };
    auto small = [](std::string name, int64_t rows) {
      Case c;
      c.name = std::move(name);
      c.rows = rows;
      c.vocab_local = 19;
      c.k = 7;
      return c;
    };
    const Case plain = small("fd", 12);
    Case minus_inf = small("fd_minus_inf", 12);
    minus_inf.inf_logprobs = true;
    minus_inf.inf_student_tail = true;
    minus_inf.mask = true;
    minus_inf.options.reduction = topk::Reduction::Sum;
    // p_rest is the clamped ~1e-7 here: the gradient is the derivative of the loss as computed (W = P + p_rest).
    Case full_mass = small("fd_full_mass", 9);
    full_mass.teacher_full_mass = true;
    full_mass.divergences = {topk::Divergence::ForwardKLRest, topk::Divergence::ReverseKL};
    // q_rest ~ e^-12: the tail's gradient q_j (W - p_rest / q_rest) is dominated by p_rest q_j / q_rest.
    Case mass_on_top = small("fd_mass_on_top", 9);
    mass_on_top.student_top_boost = 12;
    mass_on_top.divergences = {topk::Divergence::ForwardKLRest, topk::Divergence::ReverseKL};
    return {scenario("every_divergence_temperature_and_ce_mix", plain, 0.6),
            scenario("minus_inf_entries_mask_and_sum", minus_inf, 0.6),
            scenario("teacher_tail_mass_zero", full_mass, 1.0), scenario("student_mass_on_top", mass_on_top, 1.0)};
  }

  static Case fused_case() { return topk::fused_case(); }
  static Case accumulate_case() {
    Case c = topk::fused_case();
    c.mask = true;
    return c;
  }
  // Every divergence at T 1 with kd_ratio 0.8.
  static CaseJobs<TopkDistillationFamily> fused_jobs(const Case& c) {
    std::vector<Options> options;
    for (topk::Divergence d : topk::all_divergences()) options.push_back(topk::options_for(d));
    return jobs_with_options<TopkDistillationFamily>(c, 1, options);
  }
  static Case group_case() {
    Case c = topk::fused_case();
    c.with_temperature = false;
    return c;
  }
  static Case local_case() { return topk::fused_case(); }
  static Options local_options() { return topk::options_for(topk::Divergence::Mixed); }
  static Case split_case() {
    Case c = topk::fused_case();
    c.vocab_local = 48;
    return c;
  }
  static std::vector<Options> split_options() {
    std::vector<Options> options;
    for (topk::Divergence d : topk::all_divergences()) options.push_back(topk::options_for(d));
    return options;
  }

  // Row 0's label is ignore_index, rows 1 and 2 have mask 0: every row masked, with the CE mix on.
  static std::vector<std::pair<Options, Inputs>> all_masked_runs(int64_t vocab, DType, Device device) {
    std::vector<std::pair<Options, Inputs>> runs;
    for (topk::Divergence d : topk::all_divergences()) {
      Inputs t;
      t.indices = Tensor::from_ints({0, 3, 1, 2, static_cast<int32_t>(vocab - 1), 5}, {3, 2}, device);
      t.logprobs = Tensor::full({3, 2}, -1.0, DType::F32, device);
      t.labels = Tensor::from_ints({-100, 2, 4}, {3}, device);
      t.mask = Tensor::from_ints({1, 0, 0}, {3}, device);
      runs.push_back({topk::options_for(d, 0.5), t});
    }
    return runs;
  }
  static Inputs empty_inputs(int64_t) {
    Inputs t;
    t.indices = Tensor::from_ints({}, {0, 2});
    t.logprobs = Tensor::zeros({0, 2}, DType::F32);
    return t;
  }
  static Inputs valid_inputs_4x10() {
    Inputs t;
    t.indices = Tensor::from_ints({0, 3, 1, 2, 6, 5, 9, 8}, {4, 2});
    t.logprobs = Tensor::full({4, 2}, -1.0, DType::F32);
    t.labels = Tensor::from_ints({1, 2, 3, -100}, {4});
    return t;
  }

  // ---- the PyTorch oracle ----

  // The four divergences written with torch ops (log_softmax over the full vocabulary, gather at S, a masked
  // logsumexp for the rest bucket, F.cross_entropy for the CE mix), differentiated by autograd.
  static constexpr const char* kTorchScript = "torch_topk_kd.py";
  static std::vector<Case> torch_cases() {
    CaseList<Case> cases([](Case& c) {
      c.vocab_local = 41;
      c.k = 10;
    });
    cases.add("masked_mean", [](Case&) {});
    cases.add("sum_mass_on_top", [](Case& c) {
      c.options.reduction = topk::Reduction::Sum;
      c.student_top_boost = 12;
    });
    cases.add("teacher_tail_mass_zero", [](Case& c) { c.teacher_full_mass = true; });
    return cases.list();
  }
  static TorchProblem torch_problem(const Case&, const Job<TopkDistillationFamily>& job) {
    const Problem& p = *job.problem;
    const Options& o = job.options;
    return {{{"student", Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64)},
             {"indices", Tensor::from_ints(p.indices, {p.rows, p.k})},
             {"logprobs", Tensor::from_doubles(p.logprobs, {p.rows, p.k}, DType::F64)},
             {"labels", Tensor::from_ints(p.labels, {p.rows})}},
            {{"temperature", std::to_string(o.temperature)},
             {"t_squared", o.scale_by_t_squared ? "1" : "0"},
             {"kd_ratio", std::to_string(o.kd_ratio)},
             {"forward_weight", std::to_string(o.forward_weight)},
             {"targets_at_temperature", o.targets_at_temperature ? "1" : "0"},
             {"ignore_index", std::to_string(o.ignore_index)},
             {"reduction", o.reduction == topk::Reduction::Sum ? "sum" : "mean"}}};
  }
  static std::vector<std::string> torch_references(const Case&, const Options& o) {
    return {topk::divergence_name(o.divergence)};
  }
  // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
  static Tolerance torch_tolerance(DType dtype) {
    return dtype == DType::F64 ? Tolerance{1e-12, 1e-11} : Tolerance{2e-6, 4e-6};
  }
  // The gradient of one unit of probability, without the denominator: a conservative floor for the mean.
  static double torch_grad_unit(const Options& o, const Problem& p) {
    return (o.kd_ratio * topk::loss_scale_of(o) / o.temperature + 1 - o.kd_ratio) / static_cast<double>(p.rows);
  }
  static bool torch_loss_is_infinite(const Case&) { return false; }

  // ---- CUDA ----

  // V 37 (k 9), 1031 (k 64), 32771 (k 64: the looped multi-pack path; k 1000: many members of S per thread and
  // a long rank sort), f32 and bf16, every divergence with the CE mix, -inf cached log-probs and student tail.
  static std::vector<MisalignedRun<TopkDistillationFamily>> misaligned_runs() {
    std::vector<MisalignedRun<TopkDistillationFamily>> runs;
    const std::pair<int64_t, int64_t> shapes[] = {{37, 9}, {1031, 64}, {32771, 64}, {32771, 1000}};
    for (const auto& [vocab, k] : shapes)
      for (DType dtype : {DType::F32, DType::BF16})
        for (topk::Divergence d : topk::all_divergences()) {
          Case c;
          c.name = "misaligned";
          c.rows = 9;
          c.vocab_local = vocab;
          c.k = k;
          c.inf_logprobs = true;
          c.inf_student_tail = true;
          Options o;
          o.divergence = d;
          o.kd_ratio = 0.8;
          o.forward_weight = 0.3;
          runs.push_back({c, o, dtype, DType::F32, 0, "V " + std::to_string(vocab) + " k " + std::to_string(k)});
        }
    return runs;
  }
  static Case host_device_case() {
    return make_case<Case>("targets_where", [](Case& c) {
      c.mask = true;
      c.with_temperature = false;
    });
  }
  static Case gpu_accumulate_case() {
    return make_case<Case>("gpu_accumulate", [](Case& c) {
      c.vocab_local = 1031;
      c.k = 32;
      c.inf_logprobs = true;
      c.mask = true;
    });
  }
};

}  // namespace retort::loss_testing
