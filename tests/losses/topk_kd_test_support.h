#pragma once
// Shared by the top-k distillation tests: problems over a GLOBAL vocabulary (student logits, full teacher logits
// and the top-k cache made from them), the float64 dense reference written from full-vocabulary softmaxes, a
// runner that splits the student's columns over tp thread ranks and returns every rank's loss and LOCAL
// gradient for a batch of loss settings in one group (the parts every loss test shares are in
// loss_test_support.h; the error log is the one of kd_test_support.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kd_test_support.h"
#include "losses/topk_distillation.h"

namespace retort::topk_testing {

using kd_testing::ErrorLog;
using loss_testing::column_slice;
using loss_testing::grad_error;
using loss_testing::kInf;
using loss_testing::loss_error;
using loss_testing::RankResult;
using loss_testing::RecordingCommunicator;
using loss_testing::stored;
using loss_testing::test_gloo_options;
using loss_testing::Tolerance;
using losses::Reduction;
using losses::TopkDistillationOptions;
using losses::TopkDivergence;
using losses::TopkTargets;

inline const std::vector<TopkDivergence>& all_divergences() {
  static const std::vector<TopkDivergence> all = {TopkDivergence::ForwardKLRenormalized, TopkDivergence::ForwardKLRest,
                                                  TopkDivergence::ReverseKL, TopkDivergence::Mixed};
  return all;
}

inline std::string divergence_name(TopkDivergence d) {
  switch (d) {
    case TopkDivergence::ForwardKLRenormalized:
      return "forward_kl_renormalized";
    case TopkDivergence::ForwardKLRest:
      return "forward_kl_rest";
    case TopkDivergence::ReverseKL:
      return "reverse_kl";
    case TopkDivergence::Mixed:
      return "mixed";
  }
  return "?";
}

inline bool rest_bucket(TopkDivergence d) {
  return d != TopkDivergence::ForwardKLRenormalized;
}

// One scenario; the global vocabulary is vocab_local x tp, so every tp gets shards of the same odd width.
struct Case {
  std::string name;
  int64_t rows = 24;
  int64_t vocab_local = 37;
  int64_t k = 9;                    // clamped to the global vocabulary
  double scale = 3.0;               // standard deviation of the student logits; the teacher is correlated with it (0.6)
  TopkDistillationOptions options;  // reduction, normalizer, ignore_index; the rest is set per job
  int mask_every = 4;               // labels: rows i % mask_every == 1 are ignore_index; 0: none; -1: every row
  bool labels = true;               // false: no labels (and no CE mix)
  bool mask = false;                // a separate mask too: rows i % 5 == 2 are 0
  bool teacher_full_mass = false;   // the teacher's tail is -inf: the k values hold all the mass (p_rest -> clamp)
  double student_top_boost = 0;     // added to the student's logits on S: q_rest tiny when large
  bool inf_logprobs = false;        // some cached log-probs are -inf (p_j = 0), the student's logit there too
  bool inf_logprobs_only = false;   // ... with a finite student logit there (the reverse KL is then +inf)
  bool inf_student_tail = false;    // some student logits outside S are -inf
  bool inf_student_on_top = false;  // some student logits on S with p_j > 0 are -inf: the forward KLs are +inf
  bool one_shard = false;           // every index on the first shard (ids < vocab_local)
  bool three_d = false;             // logits [2, rows / 2, V_local]
  DType cache_dtype = DType::F32;   // the cached log-probs' storage (the f64 runs use f64)
  std::vector<TopkDivergence> divergences = all_divergences();
  bool with_temperature = true;    // also T = 2.5 (cache at T for the rest-bucket kinds), with the T^2 scaling
  bool without_t_squared = false;  // ... and without it
  bool with_ce = true;             // also kd_ratio 0.7 (when there are labels)
};

inline void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

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

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // dense [rows, vocab], wrt the student
  double grad_unit = 1;      // the gradient of one unit of probability
};

inline double loss_scale_of(const TopkDistillationOptions& o) {
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
                                 const TopkDistillationOptions& o, bool use_labels) {
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
      case TopkDivergence::ForwardKLRenormalized: {
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
      case TopkDivergence::ForwardKLRest:
        add_forward_rest(1.0);
        break;
      case TopkDivergence::ReverseKL:
        add_reverse(1.0);
        break;
      case TopkDivergence::Mixed:
        add_forward_rest(w);
        add_reverse(1 - w);
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
  const double denom = o.normalizer                    ? *o.normalizer
                       : o.reduction == Reduction::Sum ? 1.0
                                                       : static_cast<double>(std::max<int64_t>(count, 1));
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
inline Reference reference_for(const Case& c, const Problem& p, const TopkDistillationOptions& o, DType student,
                               DType cache) {
  std::vector<double> l = stored(p.logprobs, cache);
  if (student != DType::F64) l = stored(l, DType::F32);
  return dense_reference(p, stored(p.student, student), l, valid_rows(c, p), o, c.labels);
}

// One loss setting of a batch run in the same group: the options and its problem (cache temperature).
struct Job {
  TopkDistillationOptions options;
  const Problem* problem = nullptr;
};

struct RunOptions {
  bool group_in_options = false;  // pass the group as options.group instead of on the student's sharding
  bool device_targets = true;     // targets on the logits' device (else on the host)
  bool nccl = false;              // rank r on cuda:r over NCCL (device must be a GPU)
};

inline TopkTargets targets_of(const Case& c, const Problem& p, const Shape& leading, DType cache, Device device) {
  TopkTargets t;
  Shape with_k = leading;
  with_k.push_back(p.k);
  t.indices = Tensor::from_ints(p.indices, with_k, device);
  t.logprobs = Tensor::from_doubles(p.logprobs, with_k, cache, device);
  if (c.labels) t.labels = Tensor::from_ints(p.labels, leading, device);
  if (c.mask) t.mask = Tensor::from_ints(p.mask, leading, device);
  return t;
}

// Runs every job on `tp` ranks (no group at all at tp 1) with each rank's student columns stored as
// student_dtype on `device`; returns [job][rank] the loss, local gradient and collectives.
inline std::vector<std::vector<RankResult>> run_tp(const Case& c, const std::vector<Job>& jobs, int tp,
                                                   DType student_dtype, DType cache_dtype, Device base_device,
                                                   RunOptions run = {}) {
  std::vector<std::vector<RankResult>> results(jobs.size(), std::vector<RankResult>(static_cast<size_t>(tp)));
  loss_testing::on_ranks(
      tp, base_device, run.nccl, [&](int rank, Device device, std::shared_ptr<Communicator> transport) {
        for (size_t j = 0; j < jobs.size(); ++j) {
          const Problem& p = *jobs[j].problem;
          results[j][static_cast<size_t>(rank)] = loss_testing::run_rank(
              p, p.student, c.three_d, rank, student_dtype, device, transport, run.group_in_options, jobs[j].options,
              [&](const Tensor& student, const Shape& leading, const TopkDistillationOptions& options) {
                const TopkTargets targets =
                    targets_of(c, p, leading, cache_dtype, run.device_targets ? device : Device::cpu());
                return losses::topk_distillation_loss(student, targets, options);
              });
        }
      });
  return results;
}

// Stated once for every comparison against the float64 reference. The gradient error is relative to
// max(max |g|, the gradient of one unit of probability) (grad_error). f64: rounding only. f32: float32 math on
// exact inputs; with logits x1000 the divergences are sums of terms of ~1e3 and log q_j = (z_j - m) - log S
// carries the float32 ulp of ~1e3. bf16: the gradient is stored in bf16 (unit roundoff 2^-8 = 3.9e-3). The GPU
// sums exp in float with running maxima (the CPU in double).
inline Tolerance tolerance_for(DType dtype, const Case& c, Device device = Device::cpu()) {
  const bool huge = c.scale >= 1000, gpu = device.is_cuda();
  const Tolerance f32 = {huge ? 1e-5 : gpu ? 4e-6 : 2e-6, huge ? 1e-3 : gpu ? 1e-5 : 4e-6};
  const Tolerance bf16 = {huge ? 1e-5 : gpu ? 4e-6 : 2e-6, huge ? 5e-3 : 4e-3};
  return loss_testing::tolerance_by_dtype(dtype, f32, bf16);
}

// The jobs of a case: every divergence it covers, at T = 1 and (with_temperature) T = 2.5 with the T^2 scaling
// (and without it: without_t_squared) (the rest-bucket kinds then read a cache made at T = 2.5, the renormalized
// KL tempers the T = 1 cache), and with kd_ratio 0.7 (with_ce, when there are labels).
struct CaseJobs {
  std::map<double, Problem> problems;  // by cache temperature
  std::vector<Job> jobs;
};

inline CaseJobs jobs_for(const Case& c, int tp) {
  CaseJobs out;
  out.problems.emplace(1.0, make_problem(c, tp, 1.0));
  if (c.with_temperature) out.problems.emplace(2.5, make_problem(c, tp, 2.5));
  const std::vector<double> temperatures =
      c.with_temperature ? std::vector<double>{1.0, 2.5} : std::vector<double>{1.0};
  const std::vector<double> ratios = c.with_ce && c.labels ? std::vector<double>{1.0, 0.7} : std::vector<double>{1.0};
  for (TopkDivergence d : c.divergences)
    for (double t : temperatures)
      for (bool sq : t != 1.0 && c.without_t_squared ? std::vector<bool>{true, false} : std::vector<bool>{true})
        for (double ratio : ratios) {
          Job job;
          job.options = c.options;
          job.options.divergence = d;
          job.options.temperature = t;
          job.options.scale_by_t_squared = sq;
          job.options.kd_ratio = ratio;
          job.options.forward_weight = 0.3;
          job.options.targets_at_temperature = t != 1.0 && rest_bucket(d);
          job.problem = &out.problems.at(job.options.targets_at_temperature ? t : 1.0);
          out.jobs.push_back(job);
        }
  return out;
}

inline std::string job_label(const Job& job) {
  char buf[96];
  std::snprintf(buf, sizeof buf, " T=%g%s kd=%g", job.options.temperature,
                job.options.scale_by_t_squared ? " x T^2" : "", job.options.kd_ratio);
  return divergence_name(job.options.divergence) + buf;
}

// Every rank's loss equals the dense reference and its LOCAL gradient equals its column slice of the dense
// gradient; the forward ran exactly one MAX [rows, 3] and one SUM [rows, 7] all-reduce at tp > 1 (none at
// tp 1), the backward none.
inline void expect_matches_reference(const Case& c, int tp, DType dtype, Device device, const std::string& label,
                                     RunOptions run = {}) {
  const DType cache = dtype == DType::F64 ? DType::F64 : c.cache_dtype;
  SCOPED_TRACE(c.name + " tp " + std::to_string(tp) + " student " + std::string(dtype_name(dtype)) + " cache " +
               std::string(dtype_name(cache)) + " on " + device.str() + (run.nccl ? " over NCCL" : ""));
  const CaseJobs cj = jobs_for(c, tp);
  const auto results = run_tp(c, cj.jobs, tp, dtype, cache, device, run);
  const Tolerance tol = tolerance_for(dtype, c, device);
  for (size_t j = 0; j < cj.jobs.size(); ++j) {
    const Job& job = cj.jobs[j];
    const Problem& p = *job.problem;
    SCOPED_TRACE(job_label(job));
    const Reference ref = reference_for(c, p, job.options, dtype, cache);
    for (int r = 0; r < tp; ++r) {
      const RankResult& got = results[j][static_cast<size_t>(r)];
      const double le = loss_error(got.loss, ref.loss);
      const double ge = grad_error(got.grad, column_slice(ref.grad, p, r), ref.grad_unit);
      if (!loss_testing::expect_rank_close(r, got, results[j][0], ref.loss, le, ge, tol)) return;
      ErrorLog::get().note(label + " " + divergence_name(job.options.divergence) + " " +
                               std::string(dtype_name(dtype)) + (c.scale >= 1000 ? " x1000" : ""),
                           le, ge);
      if (!loss_testing::expect_collectives(r, tp, got, Shape{p.rows, 3}, Shape{p.rows, 7})) return;
    }
  }
}

// The scenarios every backend is checked on (distillation.md's and losses.md's edge cases).
inline std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    tweak(c);
    cases.push_back(c);
  };
  add("masked_mean", [](Case& c) { c.without_t_squared = true; });
  add("no_labels_separate_mask", [](Case& c) {
    c.labels = false;
    c.mask = true;
  });
  add("labels_and_mask_sum", [](Case& c) {
    c.mask = true;
    c.options.reduction = Reduction::Sum;
  });
  add("normalizer_3d", [](Case& c) {
    c.options.normalizer = 1000.0;
    c.three_d = true;
  });
  add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
  add("bf16_cache", [](Case& c) { c.cache_dtype = DType::BF16; });
  add("wide_shard_1031_k64", [](Case& c) {
    c.vocab_local = 1031;  // odd and not a multiple of any block size
    c.rows = 6;
    c.k = 64;
  });
  add("teacher_tail_mass_zero", [](Case& c) { c.teacher_full_mass = true; });
  add("student_mass_on_top", [](Case& c) { c.student_top_boost = 30; });  // q_rest ~ e^-30
  add("logits_x1000", [](Case& c) { c.scale = 3000; });
  add("student_mass_on_top_x1000", [](Case& c) {
    c.scale = 3000;
    c.student_top_boost = 30000;  // q_rest underflows every float: only the masked sum keeps it
  });
  add("minus_inf_logprobs_and_student_tail", [](Case& c) {
    c.inf_logprobs = true;
    c.inf_student_tail = true;
  });
  add("minus_inf_logprobs_student_finite", [](Case& c) {
    c.inf_logprobs_only = true;  // p_j = 0 under a finite student logit: the forward KLs drop the term
    c.divergences = {TopkDivergence::ForwardKLRenormalized, TopkDivergence::ForwardKLRest};
  });
  add("infinite_forward_kl", [](Case& c) {
    c.inf_student_on_top = true;  // teacher mass on a student -inf: +inf, with a finite gradient
    c.divergences = {TopkDivergence::ForwardKLRenormalized, TopkDivergence::ForwardKLRest};
    c.with_ce = false;
  });
  add("indices_on_one_shard", [](Case& c) { c.one_shard = true; });
  add("k_over_shard", [](Case& c) {
    c.vocab_local = 8;
    c.k = 13;  // k > V / tp at tp 2 and 4; k = V (an empty rest bucket) at tp 1
  });
  add("all_masked", [](Case& c) { c.mask_every = -1; });
  add("single_row", [](Case& c) {
    c.rows = 1;
    c.mask_every = 0;
  });
  return cases;
}

inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

}  // namespace retort::topk_testing
