#pragma once
// The vocab-parallel cross-entropy as a loss family of loss_family_harness.h: problems over a GLOBAL vocabulary,
// the float64 dense reference (loss and full gradient, from the explicit target distribution rather than the
// op's closed form), how the op is called, its tolerances, and the scenarios of every check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "loss_family_harness.h"
#include "losses/cross_entropy.h"
#include "torch_oracle.h"

namespace retort::loss_testing {

namespace ce {

using losses::CrossEntropyOptions;
using losses::LabelSmoothingConvention;
using losses::Reduction;

// One scenario; the global vocabulary is vocab_local x tp, so every tp gets shards of the same odd width.
struct Case {
  std::string name;
  int64_t rows = 24;
  int64_t vocab_local = 37;
  double scale = 3.0;  // standard deviation of the logits
  CrossEntropyOptions options;
  int mask_every = 4;  // rows i % mask_every == 1 are ignored; 0: none; -1: every row
  bool neg_inf_entries = false;
  bool neg_inf_shard = false;  // even rows: the last rank's whole shard is -inf (the last half at tp 1)
  bool three_d = false;        // logits [2, rows / 2, V_local], targets [2, rows / 2]
};

struct Problem {
  int64_t rows = 0, vocab = 0, vocab_local = 0;
  std::vector<double> logits;  // [rows, vocab]
  std::vector<int32_t> targets;
};

inline Problem make_problem(const Case& c, int tp, uint64_t seed = 1234) {
  Problem p;
  p.rows = c.rows;
  p.vocab_local = c.vocab_local;
  p.vocab = c.vocab_local * tp;
  std::mt19937_64 rng(seed + std::hash<std::string>{}(c.name) + static_cast<uint64_t>(tp));
  std::normal_distribution<double> normal(0.0, c.scale);
  p.logits.resize(static_cast<size_t>(p.rows * p.vocab));
  for (double& x : p.logits) x = normal(rng);
  const int64_t blocked_from = tp > 1 ? p.vocab - p.vocab_local : p.vocab / 2;
  p.targets.resize(static_cast<size_t>(p.rows));
  for (int64_t i = 0; i < p.rows; ++i) {
    const bool blocked = c.neg_inf_shard && i % 2 == 0;
    const int64_t choices = blocked ? blocked_from : p.vocab;
    const int32_t t = static_cast<int32_t>(rng() % static_cast<uint64_t>(choices));
    const bool masked = c.mask_every < 0 || (c.mask_every > 0 && i % c.mask_every == 1);
    p.targets[i] = masked ? c.options.ignore_index : t;
    double* row = p.logits.data() + i * p.vocab;
    if (blocked) std::fill(row + blocked_from, row + p.vocab, -kInf);
    if (c.neg_inf_entries) {
      for (int64_t j = 0; j < p.vocab; ++j)
        if (j != t && rng() % 7 == 0) row[j] = -kInf;
    }
  }
  return p;
}

// float64, straight from the definition: y = the smoothed target distribution, loss_i = -sum_j y_j log q_j +
// z lse^2, dloss_i/dx_j = q_j - y_j + 2 z lse q_j; reduced as the options say. The gradient error is measured on
// max |g| alone (grad_unit 0).
inline Reference dense_reference(const Problem& p, const std::vector<double>& logits, const CrossEntropyOptions& o) {
  const double V = static_cast<double>(p.vocab), a = o.label_smoothing;
  const bool megatron = o.smoothing_convention == LabelSmoothingConvention::Megatron;
  const double on_label = megatron ? 1 - a : 1 - a + a / V, off_label = megatron ? a / (V - 1) : a / V;
  Reference ref;
  ref.grad.assign(logits.size(), 0.0);
  double total = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < p.rows; ++i) {
    if (p.targets[i] == o.ignore_index) continue;
    ++valid;
    const double* x = logits.data() + i * p.vocab;
    const double m = *std::max_element(x, x + p.vocab);
    double s = 0;
    for (int64_t j = 0; j < p.vocab; ++j) s += std::exp(x[j] - m);
    const double lse = m + std::log(s);
    double row = o.z_loss * lse * lse;
    for (int64_t j = 0; j < p.vocab; ++j) {
      const double y = j == p.targets[i] ? on_label : off_label;
      if (y != 0) row += y * (lse - x[j]);  // -y log q_j; +inf for a -inf logit with mass on it
      const double q = std::exp(x[j] - lse);
      ref.grad[i * p.vocab + j] = q - y + 2 * o.z_loss * lse * q;
    }
    total += row;
  }
  const double denom = denominator_of(o, valid);
  ref.loss = total / denom;
  for (double& g : ref.grad) g /= denom;
  return ref;
}

// The case the fused-API checks use: label smoothing and z-loss on a 53-column vocabulary.
inline Case fused_case() {
  return make_case<Case>("fused", [](Case& c) {
    c.vocab_local = 53;
    c.options.label_smoothing = 0.1;
    c.options.z_loss = 1e-3;
  });
}

// The case the group checks use: label smoothing and z-loss on the default vocabulary.
inline Case smoothing_case() {
  return make_case<Case>("groups", [](Case& c) {
    c.options.label_smoothing = 0.1;
    c.options.z_loss = 1e-3;
  });
}

}  // namespace ce

struct CrossEntropyFamily {
  using Case = ce::Case;
  using Problem = ce::Problem;
  using Options = losses::CrossEntropyOptions;
  using Log = ErrorLog<CrossEntropyFamily>;
  struct Inputs {
    Tensor targets;
  };

  static constexpr const char* kTypeName = "CrossEntropy";
  static constexpr const char* kName = "ce";
  static constexpr const char* kLogPrefix = "";
  static constexpr const char* kSideInput = "";
  static constexpr const char* kLogName = "ce";
  static constexpr int kLogWidth = 28;
  static constexpr double kF32BufferTolerance = 2e-6;

  // ---- problems ----

  static Problem problem_for(const Case& c, int tp, const Options&) { return ce::make_problem(c, tp); }
  static CaseJobs<CrossEntropyFamily> jobs_for(const Case& c, int tp) {
    return jobs_with_options<CrossEntropyFamily>(c, tp, {c.options});
  }
  static const std::vector<double>& logits(const Problem& p) { return p.logits; }
  static std::vector<bool> valid_rows(const Case& c, const Problem& p) {
    std::vector<bool> valid(static_cast<size_t>(p.rows));
    for (int64_t i = 0; i < p.rows; ++i) valid[i] = p.targets[i] != c.options.ignore_index;
    return valid;
  }
  // Every fifth row's target column (on whichever rank owns it) and a spread of other columns.
  static std::vector<std::pair<int64_t, int64_t>> fd_probes(const Problem& p) {
    std::vector<std::pair<int64_t, int64_t>> probes;
    for (int64_t i = 0; i < p.rows; i += 5) {
      if (p.targets[i] >= 0) probes.emplace_back(i, p.targets[i]);
      probes.emplace_back(i, (i * 31 + 7) % p.vocab);
    }
    return probes;
  }

  // ---- the op ----

  static DType side_dtype(const Case&, DType dtype) { return dtype; }
  static Inputs inputs(const Case&, const Problem& p, int, const Shape& logits_shape, DType, const Placement& at) {
    const Shape leading(logits_shape.begin(), logits_shape.end() - 1);
    return {Tensor::from_ints(p.targets, leading, at.inputs_device())};
  }
  static Tensor loss(const Tensor& logits, const Inputs& in, const Options& o) {
    return losses::cross_entropy(logits, in.targets, o);
  }
  static losses::CrossEntropyForward forward(const Tensor& logits, const Inputs& in, const Options& o) {
    return losses::cross_entropy_forward(logits, in.targets, o);
  }
  static void backward(const Tensor& logits, const Inputs&, const losses::CrossEntropySaved& saved,
                       const Tensor& grad_output, Tensor& buffer, bool accumulate) {
    losses::cross_entropy_backward(logits, saved, grad_output, buffer, accumulate);
  }

  // ---- checking ----

  static Reference reference_for(const Case&, const Problem& p, const Options& o, DType dtype, DType) {
    return ce::dense_reference(p, stored(p.logits, dtype), o);
  }
  // Stated once for every comparison against the float64 reference (observed worst cases in the report).
  // f64: rounding only. f32: exact inputs, float32 math (~1e-7 observed); with logits x1000 the gradient rebuilds
  // q_j = exp(x_j - lse) from an f32 lse near 1e4 whose ulp is ~1e-3, so a token with sizeable probability may
  // be off by that much relative. bf16: the gradient is stored in bf16, whose unit roundoff is 2^-8 = 3.9e-3.
  // The GPU sums exp in float (the CPU in double) with an online max, hence its looser float32 bounds; not yet
  // measured on a GPU, so they are set from the float32 error analysis (S of ~4k terms: ~1e-6 relative).
  static Tolerance tolerance_for(DType dtype, const Case& c, Device device) {
    const bool huge = c.scale >= 1000, gpu = device.is_cuda();
    const Tolerance f32 = {gpu ? 4e-6 : 5e-7, huge ? 1e-3 : gpu ? 1e-5 : 2e-6};
    const Tolerance bf16 = {gpu ? 4e-6 : 5e-7, huge ? 5e-3 : gpu ? 5e-3 : 4e-3};
    return tolerance_by_dtype(dtype, f32, bf16);
  }
  // One MAX all-reduce of the row maxima [rows], one SUM of [rows, 2] (the sum of exponentials and the target
  // logit), with a third column for the smoothing's sum of logits.
  static std::pair<Shape, Shape> collective_shapes(const Problem& p, const Options& o) {
    return {Shape{p.rows}, Shape{p.rows, o.label_smoothing > 0 ? 3 : 2}};
  }
  static std::string job_label(const Options&) { return ""; }
  static std::string job_tag(const Options&) { return ""; }

  // ---- scenarios ----

  // losses.md's edge cases.
  static std::vector<Case> reference_cases() {
    CaseList<Case> cases;
    cases.add("plain_mean", [](Case&) {});
    cases.add("no_masked_rows", [](Case& c) { c.mask_every = 0; });
    cases.add("sum", [](Case& c) { c.options.reduction = ce::Reduction::Sum; });
    cases.add("normalizer", [](Case& c) { c.options.normalizer = 1000.0; });
    cases.add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
    cases.add("megatron_smoothing", [](Case& c) { c.options.label_smoothing = 0.1; });
    cases.add("pytorch_smoothing", [](Case& c) {
      c.options.label_smoothing = 0.2;
      c.options.smoothing_convention = ce::LabelSmoothingConvention::PyTorch;
    });
    cases.add("z_loss", [](Case& c) { c.options.z_loss = 1e-2; });
    cases.add("smoothing_z_loss_3d", [](Case& c) {
      c.options.label_smoothing = 0.1;
      c.options.z_loss = 1e-3;
      c.three_d = true;
    });
    cases.add("wide_shard_1031", [](Case& c) {
      c.vocab_local = 1031;  // odd and not a multiple of any block size
      c.rows = 10;
      c.options.label_smoothing = 0.05;
    });
    cases.add("logits_x1000", [](Case& c) {
      c.scale = 3000;
      c.options.label_smoothing = 0.1;
      c.options.z_loss = 1e-4;
    });
    cases.add("minus_inf_entries", [](Case& c) {
      c.neg_inf_entries = true;
      c.options.z_loss = 1e-3;
    });
    cases.add("minus_inf_shard", [](Case& c) { c.neg_inf_shard = true; });
    cases.add("minus_inf_shard_smoothing", [](Case& c) {
      c.neg_inf_shard = true;  // the loss is +inf (mass on impossible tokens), the gradient stays finite
      c.options.label_smoothing = 0.1;
    });
    cases.add("all_masked", [](Case& c) {
      c.mask_every = -1;
      c.options.label_smoothing = 0.1;
    });
    cases.add("single_row_vocab_8", [](Case& c) {
      c.rows = 1;
      c.mask_every = 0;
      c.vocab_local = 8;
    });
    return cases.list();
  }

  // tp 8: label smoothing in both conventions (the uniform term sums over all 8 shards), a -inf shard and a wide
  // shard, one dtype each.
  static std::vector<std::pair<Case, DType>> tp8_runs() {
    const auto cases = reference_cases();
    return {{case_named(cases, "megatron_smoothing"), DType::F32},
            {case_named(cases, "pytorch_smoothing"), DType::BF16},
            {case_named(cases, "minus_inf_shard_smoothing"), DType::F64},
            {case_named(cases, "wide_shard_1031"), DType::F32}};
  }

  // Probes cover target logits, other logits and both shards.
  static std::vector<FiniteDifferenceScenario<CrossEntropyFamily>> finite_difference_scenarios() {
    Case megatron;
    megatron.name = "fd_megatron";
    megatron.options.label_smoothing = 0.1;
    megatron.options.z_loss = 1e-2;
    Case sum;
    sum.name = "fd_pytorch";
    sum.neg_inf_entries = true;  // no smoothing mass may sit on them, or the loss is +inf: smoothing off here
    sum.options.reduction = ce::Reduction::Sum;
    sum.options.z_loss = 1e-3;
    Case smoothing = sum;
    smoothing.name = "fd_pytorch_smoothing";
    smoothing.neg_inf_entries = false;
    smoothing.options.label_smoothing = 0.3;
    smoothing.options.smoothing_convention = ce::LabelSmoothingConvention::PyTorch;
    return {{"megatron_smoothing_and_z_loss", {{megatron, megatron.options}}},
            {"sum_with_minus_inf_and_pytorch_smoothing", {{sum, sum.options}, {smoothing, smoothing.options}}}};
  }

  static Case fused_case() { return ce::fused_case(); }
  static Case accumulate_case() { return ce::fused_case(); }
  static CaseJobs<CrossEntropyFamily> fused_jobs(const Case& c) { return jobs_for(c, 1); }
  static Case group_case() { return ce::smoothing_case(); }
  static Case local_case() { return ce::smoothing_case(); }
  static Options local_options() { return ce::smoothing_case().options; }
  // V = 148 split into shards of 148, 74 and 37 (the Megatron smoothing bug made the loss depend on the split).
  static Case split_case() {
    Case c = ce::smoothing_case();
    c.vocab_local = 148;
    return c;
  }
  static std::vector<Options> split_options() { return {split_case().options}; }

  // Every row ignored, with smoothing and z-loss (which would otherwise add terms).
  static std::vector<std::pair<Options, Inputs>> all_masked_runs(int64_t, DType, Device device) {
    Options o;
    o.label_smoothing = 0.1;
    o.z_loss = 1e-2;
    return {{o, {Tensor::from_ints({-100, -100, -100}, {3}, device)}}};
  }
  static Inputs empty_inputs(int64_t) { return {Tensor::from_ints({}, {0})}; }
  static Inputs valid_inputs_4x10() { return {Tensor::from_ints({1, 2, 3, 4}, {4})}; }

  // ---- the PyTorch oracle ----

  // torch.nn.functional.cross_entropy with ignore_index, mean and sum, and label_smoothing under
  // LabelSmoothingConvention::PyTorch (including its +inf loss when smoothing mass sits on a -inf logit).
  static constexpr const char* kTorchScript = "torch_cross_entropy.py";
  static std::vector<Case> torch_cases() {
    CaseList<Case> cases([](Case& c) {
      c.vocab_local = 41;
      c.options.smoothing_convention = ce::LabelSmoothingConvention::PyTorch;
    });
    cases.add("ignore_index_mean", [](Case&) {});
    cases.add("custom_ignore_index_sum", [](Case& c) {
      c.options.ignore_index = 3;
      c.options.reduction = ce::Reduction::Sum;
    });
    cases.add("smoothing_mean", [](Case& c) { c.options.label_smoothing = 0.15; });
    cases.add("smoothing_sum_no_mask", [](Case& c) {
      c.options.label_smoothing = 0.3;
      c.options.reduction = ce::Reduction::Sum;
      c.mask_every = 0;
    });
    cases.add("smoothing_minus_inf", [](Case& c) {
      c.options.label_smoothing = 0.1;
      c.neg_inf_entries = true;
    });
    cases.add("minus_inf_shard", [](Case& c) { c.neg_inf_shard = true; });
    return cases.list();
  }
  static TorchProblem torch_problem(const Case&, const Job<CrossEntropyFamily>& job) {
    const Problem& p = *job.problem;
    const Options& o = job.options;
    return {{{"logits", Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64)},
             {"targets", Tensor::from_ints(p.targets, {p.rows})}},
            {{"ignore_index", std::to_string(o.ignore_index)},
             {"label_smoothing", std::to_string(o.label_smoothing)},
             {"reduction", o.reduction == ce::Reduction::Sum ? "sum" : "mean"}}};
  }
  static std::vector<std::string> torch_references(const Case&, const Options&) { return {""}; }
  // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
  static Tolerance torch_tolerance(DType dtype) {
    return dtype == DType::F64 ? Tolerance{1e-12, 1e-11} : Tolerance{2e-6, 2e-6};
  }
  static double torch_grad_unit(const Options&, const Problem&) { return 0; }
  static bool torch_loss_is_infinite(const Case& c) { return c.neg_inf_entries && c.options.label_smoothing > 0; }

  // ---- CUDA ----

  // V 37, 1031 (the vectorised paths' heads and tails) and 32771 (the looped, multi-pack path), f32 and bf16.
  static std::vector<MisalignedRun<CrossEntropyFamily>> misaligned_runs() {
    std::vector<MisalignedRun<CrossEntropyFamily>> runs;
    for (int64_t vocab : {37, 1031, 32771}) {
      for (DType dtype : {DType::F32, DType::BF16}) {
        Case c;
        c.name = "misaligned";
        c.rows = 17;
        c.vocab_local = vocab;
        c.options.label_smoothing = 0.1;
        c.options.z_loss = 1e-4;
        runs.push_back({c, c.options, dtype, dtype, 0, "V " + std::to_string(vocab)});
      }
    }
    return runs;
  }
  static Case host_device_case() {
    return make_case<Case>("targets_where", [](Case& c) { c.options.label_smoothing = 0.1; });
  }
  static Case gpu_accumulate_case() {
    return make_case<Case>("gpu_accumulate", [](Case& c) {
      c.vocab_local = 1031;
      c.options.label_smoothing = 0.1;
      c.options.z_loss = 1e-3;
    });
  }
};

}  // namespace retort::loss_testing
