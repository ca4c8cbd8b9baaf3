#pragma once
// The distribution (KD) losses as a loss family of loss_family_harness.h: student / teacher problems over a
// GLOBAL vocabulary, the float64 dense reference written from the definitions (loss and full gradient wrt the
// student), how the op is called, its tolerances, and the scenarios of every check. A case's jobs are its
// divergences x temperatures x T^2 scaling on and off, run as one batch in the same group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "loss_family_harness.h"
#include "losses/distribution_loss.h"
#include "torch_oracle.h"

namespace retort::loss_testing {

namespace kd {

using losses::DistributionLossOptions;
using losses::Divergence;
using losses::Reduction;

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

inline double loss_scale_of(const DistributionLossOptions& o) {
  return o.scale_by_t_squared ? o.temperature * o.temperature : 1.0;
}

// float64, from the definitions: p = softmax(t / T), q = softmax(x / T) over the whole vocabulary,
//   forward KL sum p (log p - log q), soft CE -sum p log q, reverse KL sum q (log q - log p),
// terms with a zero weight skipped and +inf where the weight is positive and the other log is -inf; the
// gradient wrt x_j of loss_scale x divergence (1/T from x / T):
//   forward KL, soft CE: (q_j - p_j) loss_scale / T; reverse KL: q_j (log q_j - log p_j - KL) loss_scale / T.
// grad_unit = loss_scale / T / denominator: the gradient of one unit of probability.
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
  const double denom = denominator_of(o, count);
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

inline DistributionLossOptions options_for(Divergence d, double t = 2.0) {
  DistributionLossOptions o;
  o.divergence = d;
  o.temperature = t;
  return o;
}

// The case the fused-API and group checks use: -inf entries on a 53-column vocabulary.
inline Case fused_case() {
  return make_case<Case>("fused", [](Case& c) {
    c.vocab_local = 53;
    c.inf_entries = true;
  });
}

// The case a teacher stored in another dtype than the student is checked on (every backend).
inline Case mixed_dtypes_case() {
  return make_case<Case>("mixed_dtypes", [](Case& c) {
    c.inf_entries = true;
    c.temperatures = {2.5};
    c.t_squared = {true};
  });
}

}  // namespace kd

struct DistributionLossFamily {
  using Case = kd::Case;
  using Problem = kd::Problem;
  using Options = losses::DistributionLossOptions;
  using Log = ErrorLog<DistributionLossFamily>;  // the top-k losses note theirs here too
  struct Inputs {
    Tensor teacher, labels;
  };

  static constexpr const char* kTypeName = "DistributionLoss";
  static constexpr const char* kName = "kd";
  static constexpr const char* kLogPrefix = "";
  static constexpr const char* kSideInput = "teacher";
  static constexpr const char* kLogName = "kd";
  static constexpr int kLogWidth = 44;
  static constexpr double kF32BufferTolerance = 2e-6;

  // ---- problems ----

  static Problem problem_for(const Case& c, int tp, const Options& o) { return kd::make_problem(c, tp, o.divergence); }
  // Every divergence the case covers x its temperatures x T^2 scaling on and off, each on the problem its
  // divergence's -inf pattern gives.
  static CaseJobs<DistributionLossFamily> jobs_for(const Case& c, int tp) {
    CaseJobs<DistributionLossFamily> out;
    std::map<kd::Divergence, const Problem*> problems;
    for (kd::Divergence d : c.divergences) problems[d] = &out.add_problem(kd::make_problem(c, tp, d));
    for (kd::Divergence d : c.divergences)
      for (double t : c.temperatures)
        for (bool sq : c.t_squared) {
          Options o = c.options;
          o.divergence = d;
          o.temperature = t;
          o.scale_by_t_squared = sq;
          out.add_job(o, *problems.at(d));
        }
    return out;
  }
  static const std::vector<double>& logits(const Problem& p) { return p.student; }
  static std::vector<bool> valid_rows(const Case& c, const Problem& p) { return kd::valid_rows(c, p); }
  // (row, global column) of finite student logits, every third row, both shards.
  static std::vector<std::pair<int64_t, int64_t>> fd_probes(const Problem& p) {
    std::vector<std::pair<int64_t, int64_t>> probes;
    for (int64_t i = 0; i < p.rows; i += 3)
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t j = (i * 31 + k * 17 + 7) % p.vocab;
        if (std::isfinite(p.student[i * p.vocab + j])) probes.emplace_back(i, j);
      }
    return probes;
  }

  // ---- the op ----

  static DType side_dtype(const Case&, DType dtype) { return dtype; }
  // The rank's teacher columns (stored as `side`, always on the logits' device) and the labels (when the case
  // has them).
  static Inputs inputs(const Case& c, const Problem& p, int rank, const Shape& logits_shape, DType side,
                       const Placement& at) {
    const Shape leading(logits_shape.begin(), logits_shape.end() - 1);
    const std::vector<double> teacher = column_slice(p.teacher, p, rank);
    Inputs in;
    in.teacher = at.side_row_offset > 0
                     ? padded_rows(teacher, logits_shape[0], logits_shape[1], at.side_row_offset, side, at.device)
                     : Tensor::from_doubles(teacher, logits_shape, side, at.device);
    if (c.labels) in.labels = Tensor::from_ints(p.labels, leading, at.inputs_device());
    return in;
  }
  static Tensor loss(const Tensor& student, const Inputs& in, const Options& o) {
    return losses::distribution_loss(student, in.teacher, in.labels, o);
  }
  static losses::DistributionLossForward forward(const Tensor& student, const Inputs& in, const Options& o) {
    return losses::distribution_loss_forward(student, in.teacher, in.labels, o);
  }
  static void backward(const Tensor& student, const Inputs& in, const losses::DistributionLossSaved& saved,
                       const Tensor& grad_output, Tensor& buffer, bool accumulate) {
    losses::distribution_loss_backward(student, in.teacher, saved, grad_output, buffer, accumulate);
  }

  // ---- checking ----

  static Reference reference_for(const Case& c, const Problem& p, const Options& o, DType dtype, DType side) {
    return kd::reference_for(c, p, o, dtype, side);
  }
  // Stated once for every comparison against the float64 reference (observed worst cases in the report). The
  // gradient error is relative to max(max |g|, loss_scale / T / N) (grad_error).
  // f64: rounding only. f32: exact inputs, float32 math. With logits x1000 the partials are sums of terms of
  // ~1e3 and the reverse KL's gradient q_j ((x'_j - t'_j) - E_q[x' - t']) cancels two numbers of ~1e3, so the
  // float32 ulp there (~1e-4) shows. bf16: the gradient is stored in bf16 (unit roundoff 2^-8 = 3.9e-3).
  // The GPU sums exp in float (the CPU in double) with running maxima, hence its looser float32 bounds; not yet
  // measured on a GPU, so they are set from the float32 error analysis.
  static Tolerance tolerance_for(DType dtype, const Case& c, Device device) {
    const bool huge = c.scale >= 1000, gpu = device.is_cuda();
    const Tolerance f32 = {gpu ? 4e-6 : 1e-6, huge ? 1e-3 : gpu ? 1e-5 : 2e-6};
    const Tolerance bf16 = {gpu ? 4e-6 : 1e-6, huge ? 5e-3 : 4e-3};
    return tolerance_by_dtype(dtype, f32, bf16);
  }
  // One MAX all-reduce [rows, 2] (the student's and the teacher's maxima), one SUM [rows, 3].
  static std::pair<Shape, Shape> collective_shapes(const Problem& p, const Options&) {
    return {Shape{p.rows, 2}, Shape{p.rows, 3}};
  }
  static std::string job_label(const Options& o) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " T=%g%s", o.temperature, o.scale_by_t_squared ? " x T^2" : "");
    return kd::divergence_name(o.divergence) + buf;
  }
  static std::string job_tag(const Options& o) { return kd::divergence_name(o.divergence); }

  // ---- scenarios ----

  // losses.md's edge-case list.
  static std::vector<Case> reference_cases() {
    CaseList<Case> cases;
    cases.add("masked_mean", [](Case&) {});
    cases.add("no_labels", [](Case& c) { c.labels = false; });
    cases.add("sum", [](Case& c) {
      c.options.reduction = kd::Reduction::Sum;
      c.mask_every = 0;
    });
    cases.add("normalizer_3d", [](Case& c) {
      c.options.normalizer = 1000.0;
      c.three_d = true;
    });
    cases.add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
    cases.add("wide_shard_1031", [](Case& c) {
      c.vocab_local = 1031;  // odd and not a multiple of any block size
      c.rows = 10;
    });
    cases.add("logits_x1000", [](Case& c) { c.scale = 3000; });
    cases.add("minus_inf_entries", [](Case& c) { c.inf_entries = true; });
    cases.add("minus_inf_entries_x1000", [](Case& c) {
      c.inf_entries = true;
      c.scale = 3000;
    });
    cases.add("teacher_shard_minus_inf", [](Case& c) {
      c.inf_teacher_shard = true;  // p = 0 there: no mass for the forward KL and the soft CE to weigh
      c.divergences = {kd::Divergence::ForwardKL, kd::Divergence::SoftCrossEntropy};
    });
    cases.add("student_shard_minus_inf", [](Case& c) {
      c.inf_student_shard = true;  // q = 0 there: the reverse KL's weights
      c.divergences = {kd::Divergence::ReverseKL};
    });
    cases.add("both_shards_minus_inf", [](Case& c) {
      c.inf_teacher_shard = true;
      c.inf_student_shard = true;
      c.inf_entries = true;
    });
    cases.add("infinite_loss", [](Case& c) {
      c.inf_entries = true;  // teacher mass on student -inf: +inf, with a finite gradient
      c.against_divergence = true;
      c.divergences = {kd::Divergence::ForwardKL, kd::Divergence::SoftCrossEntropy};
    });
    cases.add("all_masked", [](Case& c) { c.mask_every = -1; });
    cases.add("single_row_vocab_8", [](Case& c) {
      c.rows = 1;
      c.mask_every = 0;
      c.vocab_local = 8;
    });
    return cases.list();
  }

  // tp 8: forward KL, reverse KL and soft CE at T 1 and 2.5 (T^2 scaled), on the plain masked case (f32) and on
  // -inf entries with whole -inf teacher and student shards (bf16).
  static std::vector<std::pair<Case, DType>> tp8_runs() {
    std::vector<std::pair<Case, DType>> runs = {{case_named(reference_cases(), "masked_mean"), DType::F32},
                                                {case_named(reference_cases(), "both_shards_minus_inf"), DType::BF16}};
    for (auto& run : runs) run.first.t_squared = {true};
    return runs;
  }

  // Every divergence at T 1 and 2.5 with and without the T^2 scaling; -inf entries and whole -inf shards with the
  // sum reduction at T 2.5. Masked rows are in the problems too.
  static std::vector<FiniteDifferenceScenario<DistributionLossFamily>> finite_difference_scenarios() {
    FiniteDifferenceScenario<DistributionLossFamily> every{"every_divergence_temperature_and_scaling", {}};
    Case plain;
    plain.name = "fd";
    for (kd::Divergence d : kd::all_divergences())
      for (double t : {1.0, 2.5})
        for (bool sq : {true, false}) {
          Options o;
          o.divergence = d;
          o.temperature = t;
          o.scale_by_t_squared = sq;
          every.runs.emplace_back(plain, o);
        }
    FiniteDifferenceScenario<DistributionLossFamily> minus_inf{"minus_inf_entries_and_sum", {}};
    Case c;
    c.name = "fd_minus_inf";
    c.inf_entries = true;
    c.inf_teacher_shard = true;
    c.inf_student_shard = true;
    c.options.reduction = kd::Reduction::Sum;
    for (kd::Divergence d : kd::all_divergences()) {
      Options o = c.options;
      o.divergence = d;
      o.temperature = 2.5;
      minus_inf.runs.emplace_back(c, o);
    }
    return {every, minus_inf};
  }

  static Case fused_case() { return kd::fused_case(); }
  static Case accumulate_case() { return kd::fused_case(); }
  // Every divergence at T 2.
  static CaseJobs<DistributionLossFamily> fused_jobs(const Case& c) {
    std::vector<Options> options;
    for (kd::Divergence d : kd::all_divergences()) options.push_back(kd::options_for(d));
    return jobs_with_options<DistributionLossFamily>(c, 1, options);
  }
  static Case group_case() {
    Case c = kd::fused_case();
    c.temperatures = {2.5};
    c.t_squared = {true};
    return c;
  }
  static Case local_case() { return kd::fused_case(); }
  static Options local_options() { return kd::options_for(kd::Divergence::ForwardKL); }
  static Case split_case() {
    Case c = kd::fused_case();
    c.vocab_local = 48;
    return c;
  }
  static std::vector<Options> split_options() { return {kd::options_for(kd::Divergence::SoftCrossEntropy, 1.5)}; }

  // Every label ignore_index, for every divergence at T 1 and 2.
  static std::vector<std::pair<Options, Inputs>> all_masked_runs(int64_t vocab, DType dtype, Device device) {
    std::vector<std::pair<Options, Inputs>> runs;
    for (kd::Divergence d : kd::all_divergences())
      for (double t : {1.0, 2.0})
        runs.push_back(
            {kd::options_for(d, t),
             {Tensor::full({3, vocab}, -0.5, dtype, device), Tensor::from_ints({-100, -100, -100}, {3}, device)}});
    return runs;
  }
  static Inputs empty_inputs(int64_t vocab) { return {Tensor::zeros({0, vocab}, DType::F32), Tensor()}; }
  static Inputs valid_inputs_4x10() { return {Tensor::zeros({4, 10}, DType::F32), Tensor()}; }

  // ---- the PyTorch oracle ----

  // F.kl_div(log_softmax(x / T), log_softmax(t / T), log_target=True) summed per row and averaged over the valid
  // rows, x T^2 (the forward KL), the same with the arguments swapped (the reverse KL), and KD losses written with
  // torch ops (forward KL, reverse KL and soft cross-entropy, which also take -inf entries), all differentiated
  // by autograd.
  static constexpr const char* kTorchScript = "torch_kd.py";
  static std::vector<Case> torch_cases() {
    CaseList<Case> cases([](Case& c) { c.vocab_local = 41; });
    cases.add("masked_mean", [](Case&) {});
    cases.add("sum_no_labels", [](Case& c) {
      c.options.reduction = kd::Reduction::Sum;
      c.labels = false;
    });
    cases.add("minus_inf", [](Case& c) {
      c.inf_entries = true;  // in both, or on the side whose zero weight drops the term
      c.inf_teacher_shard = true;
      c.inf_student_shard = true;
    });
    return cases.list();
  }
  static TorchProblem torch_problem(const Case& c, const Job<DistributionLossFamily>& job) {
    const Problem& p = *job.problem;
    const Options& o = job.options;
    return {{{"student", Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64)},
             {"teacher", Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F64)},
             {"labels", Tensor::from_ints(p.labels, {p.rows})}},
            {{"temperature", std::to_string(o.temperature)},
             {"t_squared", o.scale_by_t_squared ? "1" : "0"},
             {"ignore_index", std::to_string(o.ignore_index)},
             {"use_labels", c.labels ? "1" : "0"},
             {"reduction", o.reduction == kd::Reduction::Sum ? "sum" : "mean"}}};
  }
  // The torch references a divergence is compared with (kl_div's log_target form is NaN for a -inf target).
  static std::vector<std::string> torch_references(const Case& c, const Options& o) {
    const bool finite = !c.inf_entries && !c.inf_teacher_shard && !c.inf_student_shard;
    switch (o.divergence) {
      case kd::Divergence::ForwardKL:
        return finite ? std::vector<std::string>{"kl_div_forward", "kd_ops"} : std::vector<std::string>{"kd_ops"};
      case kd::Divergence::ReverseKL:
        return finite ? std::vector<std::string>{"kl_div_reverse", "reverse_ops"}
                      : std::vector<std::string>{"reverse_ops"};
      case kd::Divergence::SoftCrossEntropy:
        return {"soft_ce_ops"};
    }
    return {};
  }
  // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
  static Tolerance torch_tolerance(DType dtype) {
    return dtype == DType::F64 ? Tolerance{1e-12, 1e-11} : Tolerance{2e-6, 2e-6};
  }
  // The gradient of one unit of probability without the denominator: a conservative floor for the mean as well.
  static double torch_grad_unit(const Options& o, const Problem& p) {
    return kd::loss_scale_of(o) / o.temperature / static_cast<double>(p.rows);
  }
  static bool torch_loss_is_infinite(const Case&) { return false; }

  // ---- CUDA ----

  // V 37, 1031 and 32771, f32 and bf16 students, the teacher in the student's dtype or f32, at the student's
  // offset or another (with another dtype or alignment the kernels take the scalar path throughout), every
  // divergence at T 2.5, -inf entries.
  static std::vector<MisalignedRun<DistributionLossFamily>> misaligned_runs() {
    std::vector<MisalignedRun<DistributionLossFamily>> runs;
    for (int64_t vocab : {37, 1031, 32771})
      for (DType dtype : {DType::F32, DType::BF16})
        for (DType teacher_dtype : {dtype, DType::F32})
          for (bool same_offset : {true, false})
            for (kd::Divergence d : kd::all_divergences()) {
              Case c;
              c.name = "misaligned";
              c.rows = 17;
              c.vocab_local = vocab;
              c.inf_entries = true;
              Options o;
              o.divergence = d;
              o.temperature = 2.5;
              runs.push_back({c, o, dtype, teacher_dtype, same_offset ? 1 : 2, "V " + std::to_string(vocab)});
            }
    return runs;
  }
  static Case host_device_case() {
    return make_case<Case>("labels_where", [](Case& c) {
      c.temperatures = {2.0};
      c.t_squared = {true};
    });
  }
  static Case gpu_accumulate_case() {
    return make_case<Case>("gpu_accumulate", [](Case& c) {
      c.vocab_local = 1031;
      c.inf_entries = true;
    });
  }
};

}  // namespace retort::loss_testing
