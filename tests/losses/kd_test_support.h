#pragma once
// Shared by the distribution-loss (KD) tests: student / teacher problems over a GLOBAL vocabulary, the float64
// dense reference written from the definitions (loss and full gradient wrt the student), a runner that splits the
// columns over tp thread ranks and returns every rank's loss and LOCAL gradient for a batch of loss settings in
// one group (the parts every loss test shares are in loss_test_support.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "loss_test_support.h"
#include "losses/distribution_loss.h"
#include "parallel/comm/thread_ranks.h"

namespace retort::kd_testing {

using loss_testing::column_slice;
using loss_testing::grad_error;
using loss_testing::kInf;
using loss_testing::loss_error;
using loss_testing::RankResult;
using loss_testing::RecordingCommunicator;
using loss_testing::stored;
using loss_testing::test_gloo_options;
using loss_testing::Tolerance;
using losses::DistributionLossOptions;
using losses::Divergence;
using losses::Reduction;

// The distribution and top-k tests share one log.
struct ErrorLogTag {
  static constexpr const char* kName = "kd";
  static constexpr int kWidth = 44;
};
using ErrorLog = loss_testing::ErrorLog<ErrorLogTag>;

inline const std::vector<Divergence>& all_divergences() {
  static const std::vector<Divergence> all = {Divergence::ForwardKL, Divergence::ReverseKL,
                                              Divergence::SoftCrossEntropy};
  return all;
}

inline std::string divergence_name(Divergence d) {
  switch (d) {
    case Divergence::ForwardKL:
      return "forward_kl";
    case Divergence::ReverseKL:
      return "reverse_kl";
    case Divergence::SoftCrossEntropy:
      return "soft_ce";
  }
  return "?";
}

// One scenario; the global vocabulary is vocab_local x tp, so every tp gets shards of the same odd width.
struct Case {
  std::string name;
  int64_t rows = 24;
  int64_t vocab_local = 37;
  double scale = 3.0;  // standard deviation of the logits; the teacher is correlated with the student (0.6)
  DistributionLossOptions options;  // reduction, normalizer, ignore_index; divergence and T are set per run
  int mask_every = 4;               // rows i % mask_every == 1 are masked; 0: none; -1: every row
  bool labels = true;               // false: no labels tensor at all (every row counts)
  // Scattered -inf entries (1 in 7): in both, or on the one side where the divergence gives the term 0
  // (teacher for forward KL and soft CE, student for reverse KL). With against_divergence the one-sided
  // entries go to the other side, which makes the loss +inf (forward KL and soft CE only: gradient finite).
  bool inf_entries = false;
  bool against_divergence = false;
  // Even rows: the last rank's whole shard (the last half at tp 1) is -inf on the teacher and/or the student.
  bool inf_teacher_shard = false;
  bool inf_student_shard = false;
  bool three_d = false;  // logits [2, rows / 2, V_local], labels [2, rows / 2]
  std::vector<Divergence> divergences = all_divergences();
  std::vector<double> temperatures = {1.0, 2.5};
  std::vector<bool> t_squared = {true, false};
};

inline void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

struct Problem {
  int64_t rows = 0, vocab = 0, vocab_local = 0;
  std::vector<double> student, teacher;  // [rows, vocab]
  std::vector<int32_t> labels;           // masking only
};

inline bool masked(const Case& c, int64_t row) {
  return c.mask_every < 0 || (c.mask_every > 0 && row % c.mask_every == 1);
}

inline Problem make_problem(const Case& c, int tp, Divergence divergence, uint64_t seed = 4321) {
  Problem p;
  p.rows = c.rows;
  p.vocab_local = c.vocab_local;
  p.vocab = c.vocab_local * tp;
  std::mt19937_64 rng(seed + std::hash<std::string>{}(c.name) + static_cast<uint64_t>(tp));
  std::normal_distribution<double> normal(0.0, c.scale);
  const size_t n = static_cast<size_t>(p.rows * p.vocab);
  p.student.resize(n);
  p.teacher.resize(n);
  for (size_t k = 0; k < n; ++k) {
    p.student[k] = normal(rng);
    p.teacher[k] = 0.6 * p.student[k] + 0.8 * normal(rng);
  }
  const bool teacher_side = (divergence != Divergence::ReverseKL) != c.against_divergence;
  const int64_t blocked_from = tp > 1 ? p.vocab - p.vocab_local : p.vocab / 2;
  p.labels.resize(static_cast<size_t>(p.rows));
  for (int64_t i = 0; i < p.rows; ++i) {
    p.labels[i] = masked(c, i) ? c.options.ignore_index : static_cast<int32_t>(i % p.vocab);
    double* x = p.student.data() + i * p.vocab;
    double* t = p.teacher.data() + i * p.vocab;
    if (i % 2 == 0) {
      if (c.inf_teacher_shard) std::fill(t + blocked_from, t + p.vocab, -kInf);
      if (c.inf_student_shard) std::fill(x + blocked_from, x + p.vocab, -kInf);
    }
    if (!c.inf_entries) continue;
    const int64_t keep = (i * 13) % std::max<int64_t>(blocked_from, 1);  // one finite column on both sides
    for (int64_t j = 0; j < p.vocab; ++j) {
      if (j == keep || rng() % 7 != 0) continue;
      if (rng() % 2 == 0) {
        x[j] = t[j] = -kInf;
      } else {
        (teacher_side ? t : x)[j] = -kInf;
      }
    }
  }
  return p;
}

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // dense [rows, vocab], wrt the student
  double grad_unit = 1;      // loss_scale / T / denominator: the gradient of one unit of probability
};

inline double loss_scale_of(const DistributionLossOptions& o) {
  return o.scale_by_t_squared ? o.temperature * o.temperature : 1.0;
}

// float64, from the definitions: p = softmax(t / T), q = softmax(x / T) over the whole vocabulary,
//   forward KL sum p (log p - log q), soft CE -sum p log q, reverse KL sum q (log q - log p),
// terms with a zero weight skipped and +inf where the weight is positive and the other log is -inf; the
// gradient wrt x_j of loss_scale x divergence (1/T from x / T):
//   forward KL, soft CE: (q_j - p_j) loss_scale / T; reverse KL: q_j (log q_j - log p_j - KL) loss_scale / T.
inline Reference dense_reference(const Problem& p, const std::vector<double>& student,
                                 const std::vector<double>& teacher, const std::vector<bool>& valid,
                                 const DistributionLossOptions& o) {
  const double T = o.temperature, scale = loss_scale_of(o);
  Reference ref;
  ref.grad.assign(student.size(), 0.0);
  double total = 0;
  int64_t count = 0;
  auto log_softmax = [&](const double* z, std::vector<double>& out) {
    double m = -kInf;
    for (int64_t j = 0; j < p.vocab; ++j) m = std::max(m, z[j] / T);
    double s = 0;
    for (int64_t j = 0; j < p.vocab; ++j) s += std::exp(z[j] / T - m);
    out.resize(static_cast<size_t>(p.vocab));
    // (z / T - m) - log s: exact near the top, where a rounded m + log s (ulp ~1e-12 at logits x1000) would move q
    // by that much relative, and the reverse KL's gradient multiplies such errors by differences of ~1e3.
    for (int64_t j = 0; j < p.vocab; ++j) out[j] = (z[j] / T - m) - std::log(s);
  };
  std::vector<double> log_q, log_p;
  for (int64_t i = 0; i < p.rows; ++i) {
    if (!valid[i]) continue;
    ++count;
    log_softmax(student.data() + i * p.vocab, log_q);
    log_softmax(teacher.data() + i * p.vocab, log_p);
    double div = 0;
    for (int64_t j = 0; j < p.vocab; ++j) {
      const double lq = log_q[j], lp = log_p[j], q = std::exp(lq), pj = std::exp(lp);
      switch (o.divergence) {
        case Divergence::ForwardKL:
          if (lp != -kInf) div += lq == -kInf ? kInf : pj * (lp - lq);
          break;
        case Divergence::SoftCrossEntropy:
          if (lp != -kInf) div += lq == -kInf ? kInf : -pj * lq;
          break;
        case Divergence::ReverseKL:
          if (lq != -kInf) div += lp == -kInf ? kInf : q * (lq - lp);
          break;
      }
    }
    for (int64_t j = 0; j < p.vocab; ++j) {
      const double lq = log_q[j], lp = log_p[j], q = std::exp(lq), pj = std::exp(lp);
      double g = q - pj;
      if (o.divergence == Divergence::ReverseKL) g = lq == -kInf ? 0.0 : q * (lq - lp - div);
      ref.grad[i * p.vocab + j] = g * scale / T;
    }
    total += scale * div;
  }
  const double denom = o.normalizer                    ? *o.normalizer
                       : o.reduction == Reduction::Sum ? 1.0
                                                       : static_cast<double>(std::max<int64_t>(count, 1));
  ref.loss = total / denom;
  for (double& g : ref.grad) g /= denom;
  ref.grad_unit = scale / T / denom;
  return ref;
}

inline std::vector<bool> valid_rows(const Case& c, const Problem& p) {
  std::vector<bool> valid(static_cast<size_t>(p.rows));
  for (int64_t i = 0; i < p.rows; ++i) valid[i] = !c.labels || p.labels[i] != c.options.ignore_index;
  return valid;
}

// The reference for the values the op actually sees (both sides rounded to their storage dtype, the teacher to
// the student's compute precision as the CPU path does; the GPU computes in float32 anyway).
inline Reference reference_for(const Case& c, const Problem& p, const DistributionLossOptions& o, DType student,
                               DType teacher) {
  std::vector<double> t = stored(p.teacher, teacher);
  if (student != DType::F64) t = stored(t, DType::F32);
  return dense_reference(p, stored(p.student, student), t, valid_rows(c, p), o);
}

// One loss setting of a batch run in the same group: the options (divergence, T, scaling) and its problem.
struct Job {
  DistributionLossOptions options;
  const Problem* problem = nullptr;
};

struct RunOptions {
  bool group_in_options = false;  // pass the group as options.group instead of on the student's sharding
  bool device_labels = true;      // labels on the logits' device (else on the host)
  bool nccl = false;              // rank r on cuda:r over NCCL (device must be a GPU)
};

// Runs every job on `tp` ranks (no group at all at tp 1) with each rank's column shards stored as the given
// dtypes on `device`; returns [job][rank] the loss, local gradient and collectives.
inline std::vector<std::vector<RankResult>> run_tp(const Case& c, const std::vector<Job>& jobs, int tp,
                                                   DType student_dtype, DType teacher_dtype, Device base_device,
                                                   RunOptions run = {}) {
  std::vector<std::vector<RankResult>> results(jobs.size(), std::vector<RankResult>(static_cast<size_t>(tp)));
  loss_testing::on_ranks(
      tp, base_device, run.nccl, [&](int rank, Device device, std::shared_ptr<Communicator> transport) {
        for (size_t k = 0; k < jobs.size(); ++k) {
          const Problem& p = *jobs[k].problem;
          results[k][static_cast<size_t>(rank)] = loss_testing::run_rank(
              p, p.student, c.three_d, rank, student_dtype, device, transport, run.group_in_options, jobs[k].options,
              [&](const Tensor& student, const Shape& leading, const DistributionLossOptions& options) {
                const Tensor teacher =
                    Tensor::from_doubles(column_slice(p.teacher, p, rank), student.shape(), teacher_dtype, device);
                const Tensor labels =
                    c.labels ? Tensor::from_ints(p.labels, leading, run.device_labels ? device : Device::cpu())
                             : Tensor();
                return losses::distribution_loss(student, teacher, labels, options);
              });
        }
      });
  return results;
}

// Stated once for every comparison against the float64 reference (observed worst cases in the report). The
// gradient error is relative to max(max |g|, loss_scale / T / N) (grad_error).
// f64: rounding only. f32: exact inputs, float32 math. With logits x1000 the partials are sums of terms of
// ~1e3 and the reverse KL's gradient q_j ((x'_j - t'_j) - E_q[x' - t']) cancels two numbers of ~1e3, so the
// float32 ulp there (~1e-4) shows. bf16: the gradient is stored in bf16 (unit roundoff 2^-8 = 3.9e-3).
// The GPU sums exp in float (the CPU in double) with running maxima, hence its looser float32 bounds; not yet
// measured on a GPU, so they are set from the float32 error analysis.
inline Tolerance tolerance_for(DType dtype, const Case& c, Device device = Device::cpu()) {
  const bool huge = c.scale >= 1000, gpu = device.is_cuda();
  const Tolerance f32 = {gpu ? 4e-6 : 1e-6, huge ? 1e-3 : gpu ? 1e-5 : 2e-6};
  const Tolerance bf16 = {gpu ? 4e-6 : 1e-6, huge ? 5e-3 : 4e-3};
  return loss_testing::tolerance_by_dtype(dtype, f32, bf16);
}

// The jobs of a case: every divergence it covers x its temperatures x T^2 scaling on and off, each with the
// problem its divergence's -inf pattern gives.
struct CaseJobs {
  std::map<Divergence, Problem> problems;
  std::vector<Job> jobs;
};

inline CaseJobs jobs_for(const Case& c, int tp) {
  CaseJobs out;
  for (Divergence d : c.divergences) out.problems.emplace(d, make_problem(c, tp, d));
  for (Divergence d : c.divergences)
    for (double t : c.temperatures)
      for (bool sq : c.t_squared) {
        Job job;
        job.options = c.options;
        job.options.divergence = d;
        job.options.temperature = t;
        job.options.scale_by_t_squared = sq;
        job.problem = &out.problems.at(d);
        out.jobs.push_back(job);
      }
  return out;
}

inline std::string job_label(const Job& job) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " T=%g%s", job.options.temperature, job.options.scale_by_t_squared ? " x T^2" : "");
  return divergence_name(job.options.divergence) + buf;
}

// Every rank's loss equals the dense reference and its LOCAL gradient equals its column slice of the dense
// gradient; the forward ran exactly one MAX [rows, 2] and one SUM [rows, 3] all-reduce at tp > 1 (none at
// tp 1), the backward none.
inline void expect_matches_reference(const Case& c, int tp, DType dtype, DType teacher_dtype, Device device,
                                     const std::string& label, RunOptions run = {}) {
  SCOPED_TRACE(c.name + " tp " + std::to_string(tp) + " student " + std::string(dtype_name(dtype)) + " teacher " +
               std::string(dtype_name(teacher_dtype)) + " on " + device.str() + (run.nccl ? " over NCCL" : ""));
  const CaseJobs cj = jobs_for(c, tp);
  const auto results = run_tp(c, cj.jobs, tp, dtype, teacher_dtype, device, run);
  const Tolerance tol = tolerance_for(dtype, c, device);  // the reference sees the stored teacher exactly
  for (size_t k = 0; k < cj.jobs.size(); ++k) {
    const Job& job = cj.jobs[k];
    const Problem& p = *job.problem;
    SCOPED_TRACE(job_label(job));
    const Reference ref = reference_for(c, p, job.options, dtype, teacher_dtype);
    for (int r = 0; r < tp; ++r) {
      const RankResult& got = results[k][static_cast<size_t>(r)];
      const double le = loss_error(got.loss, ref.loss);
      const double ge = grad_error(got.grad, column_slice(ref.grad, p, r), ref.grad_unit);
      if (!loss_testing::expect_rank_close(r, got, results[k][0], ref.loss, le, ge, tol)) return;
      const std::string dtypes = dtype == teacher_dtype
                                     ? std::string(dtype_name(dtype))
                                     : std::string(dtype_name(dtype)) + "/" + std::string(dtype_name(teacher_dtype));
      ErrorLog::get().note(
          label + " " + divergence_name(job.options.divergence) + " " + dtypes + (c.scale >= 1000 ? " x1000" : ""), le,
          ge);
      if (!loss_testing::expect_collectives(r, tp, got, Shape{p.rows, 2}, Shape{p.rows, 3})) return;
    }
  }
}

// The scenarios every backend is checked on (losses.md's edge-case list).
inline std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    tweak(c);
    cases.push_back(c);
  };
  add("masked_mean", [](Case&) {});
  add("no_labels", [](Case& c) { c.labels = false; });
  add("sum", [](Case& c) {
    c.options.reduction = Reduction::Sum;
    c.mask_every = 0;
  });
  add("normalizer_3d", [](Case& c) {
    c.options.normalizer = 1000.0;
    c.three_d = true;
  });
  add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
  add("wide_shard_1031", [](Case& c) {
    c.vocab_local = 1031;  // odd and not a multiple of any block size
    c.rows = 10;
  });
  add("logits_x1000", [](Case& c) { c.scale = 3000; });
  add("minus_inf_entries", [](Case& c) { c.inf_entries = true; });
  add("minus_inf_entries_x1000", [](Case& c) {
    c.inf_entries = true;
    c.scale = 3000;
  });
  add("teacher_shard_minus_inf", [](Case& c) {
    c.inf_teacher_shard = true;  // p = 0 there: no mass for the forward KL and the soft CE to weigh
    c.divergences = {Divergence::ForwardKL, Divergence::SoftCrossEntropy};
  });
  add("student_shard_minus_inf", [](Case& c) {
    c.inf_student_shard = true;  // q = 0 there: the reverse KL's weights
    c.divergences = {Divergence::ReverseKL};
  });
  add("both_shards_minus_inf", [](Case& c) {
    c.inf_teacher_shard = true;
    c.inf_student_shard = true;
    c.inf_entries = true;
  });
  add("infinite_loss", [](Case& c) {
    c.inf_entries = true;  // teacher mass on student -inf: +inf, with a finite gradient
    c.against_divergence = true;
    c.divergences = {Divergence::ForwardKL, Divergence::SoftCrossEntropy};
  });
  add("all_masked", [](Case& c) { c.mask_every = -1; });
  add("single_row_vocab_8", [](Case& c) {
    c.rows = 1;
    c.mask_every = 0;
    c.vocab_local = 8;
  });
  return cases;
}

// The case a teacher stored in another dtype than the student is checked on (every backend).
inline Case mixed_dtypes_case() {
  Case c;
  c.name = "mixed_dtypes";
  c.inf_entries = true;
  c.temperatures = {2.5};
  c.t_squared = {true};
  return c;
}

inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

}  // namespace retort::kd_testing
