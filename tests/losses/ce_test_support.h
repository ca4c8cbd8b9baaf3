#pragma once
// Shared by the vocab-parallel cross-entropy tests: problems over a GLOBAL vocabulary, the float64 dense
// reference (loss and full gradient, from the explicit target distribution rather than the op's closed form),
// and a runner that splits the columns over tp thread ranks and returns every rank's loss, LOCAL gradient and
// collectives (the parts every loss test shares are in loss_test_support.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "loss_test_support.h"
#include "losses/cross_entropy.h"

namespace retort::ce_testing {

using loss_testing::column_slice;
using loss_testing::kInf;
using loss_testing::loss_error;
using loss_testing::RankResult;
using loss_testing::RecordingCommunicator;
using loss_testing::scaled_error;
using loss_testing::stored;
using loss_testing::test_gloo_options;
using loss_testing::Tolerance;
using losses::CrossEntropyOptions;
using losses::LabelSmoothingConvention;
using losses::Reduction;

struct ErrorLogTag {
  static constexpr const char* kName = "ce";
  static constexpr int kWidth = 28;
};
using ErrorLog = loss_testing::ErrorLog<ErrorLogTag>;

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

inline void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

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

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // dense [rows, vocab]
};

// float64, straight from the definition: y = the smoothed target distribution, loss_i = -sum_j y_j log q_j +
// z lse^2, dloss_i/dx_j = q_j - y_j + 2 z lse q_j; reduced as the options say.
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
  const double denom = o.normalizer                    ? *o.normalizer
                       : o.reduction == Reduction::Sum ? 1.0
                                                       : static_cast<double>(std::max<int64_t>(valid, 1));
  ref.loss = total / denom;
  for (double& g : ref.grad) g /= denom;
  return ref;
}

struct RunOptions {
  bool group_in_options = false;  // pass the group as options.group instead of on the logits' sharding
  bool device_targets = true;     // targets on the logits' device (else on the host)
  bool nccl = false;              // rank r on cuda:r over NCCL (device must be a GPU)
};

// Runs the loss on `tp` ranks (no group at all at tp 1) with each rank's column shard stored as `dtype` on
// `device`, and returns every rank's loss, local gradient and collectives.
inline std::vector<RankResult> run_tp(const Case& c, const Problem& p, int tp, DType dtype, Device base_device,
                                      RunOptions run = {}) {
  std::vector<RankResult> results(static_cast<size_t>(tp));
  loss_testing::on_ranks(
      tp, base_device, run.nccl, [&](int rank, Device device, std::shared_ptr<Communicator> transport) {
        results[static_cast<size_t>(rank)] = loss_testing::run_rank(
            p, p.logits, c.three_d, rank, dtype, device, transport, run.group_in_options, c.options,
            [&](const Tensor& logits, const Shape& leading, const CrossEntropyOptions& options) {
              const Tensor targets = Tensor::from_ints(p.targets, leading, run.device_targets ? device : Device::cpu());
              return losses::cross_entropy(logits, targets, options);
            });
      });
  return results;
}

// Stated once for every comparison against the float64 reference (observed worst cases in the report).
// f64: rounding only. f32: exact inputs, float32 math (~1e-7 observed); with logits x1000 the gradient rebuilds
// q_j = exp(x_j - lse) from an f32 lse near 1e4 whose ulp is ~1e-3, so a token with sizeable probability may
// be off by that much relative. bf16: the gradient is stored in bf16, whose unit roundoff is 2^-8 = 3.9e-3.
// The GPU sums exp in float (the CPU in double) with an online max, hence its looser float32 bounds; not yet
// measured on a GPU, so they are set from the float32 error analysis (S of ~4k terms: ~1e-6 relative).
inline Tolerance tolerance_for(DType dtype, const Case& c, Device device = Device::cpu()) {
  const bool huge = c.scale >= 1000, gpu = device.is_cuda();
  const Tolerance f32 = {gpu ? 4e-6 : 5e-7, huge ? 1e-3 : gpu ? 1e-5 : 2e-6};
  const Tolerance bf16 = {gpu ? 4e-6 : 5e-7, huge ? 5e-3 : gpu ? 5e-3 : 4e-3};
  return loss_testing::tolerance_by_dtype(dtype, f32, bf16);
}

// Every rank's loss equals the dense reference and its LOCAL gradient equals its column slice of the dense
// gradient; the forward ran exactly one MAX and one SUM all-reduce at tp > 1 (none at tp 1), the backward none.
inline void expect_matches_reference(const Case& c, int tp, DType dtype, Device device, const std::string& label,
                                     RunOptions run = {}) {
  SCOPED_TRACE(c.name + " tp " + std::to_string(tp) + " " + std::string(dtype_name(dtype)) + " on " + device.str() +
               (run.nccl ? " over NCCL" : ""));
  const Problem p = make_problem(c, tp);
  const Reference ref = dense_reference(p, stored(p.logits, dtype), c.options);
  const auto results = run_tp(c, p, tp, dtype, device, run);
  const Tolerance tol = tolerance_for(dtype, c, device);
  for (int r = 0; r < tp; ++r) {
    const RankResult& got = results[static_cast<size_t>(r)];
    const double le = loss_error(got.loss, ref.loss), ge = scaled_error(got.grad, column_slice(ref.grad, p, r));
    if (!loss_testing::expect_rank_close(r, got, results[0], ref.loss, le, ge, tol)) return;
    ErrorLog::get().note(label + " " + std::string(dtype_name(dtype)) + (c.scale >= 1000 ? " x1000" : ""), le, ge);
    if (!loss_testing::expect_collectives(r, tp, got, Shape{p.rows},
                                          Shape{p.rows, c.options.label_smoothing > 0 ? 3 : 2}))
      return;
  }
}

inline std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    tweak(c);
    cases.push_back(c);
  };
  add("plain_mean", [](Case&) {});
  add("no_masked_rows", [](Case& c) { c.mask_every = 0; });
  add("sum", [](Case& c) { c.options.reduction = Reduction::Sum; });
  add("normalizer", [](Case& c) { c.options.normalizer = 1000.0; });
  add("custom_ignore_index", [](Case& c) { c.options.ignore_index = 0; });
  add("megatron_smoothing", [](Case& c) { c.options.label_smoothing = 0.1; });
  add("pytorch_smoothing", [](Case& c) {
    c.options.label_smoothing = 0.2;
    c.options.smoothing_convention = LabelSmoothingConvention::PyTorch;
  });
  add("z_loss", [](Case& c) { c.options.z_loss = 1e-2; });
  add("smoothing_z_loss_3d", [](Case& c) {
    c.options.label_smoothing = 0.1;
    c.options.z_loss = 1e-3;
    c.three_d = true;
  });
  add("wide_shard_1031", [](Case& c) {
    c.vocab_local = 1031;  // odd and not a multiple of any block size
    c.rows = 10;
    c.options.label_smoothing = 0.05;
  });
  add("logits_x1000", [](Case& c) {
    c.scale = 3000;
    c.options.label_smoothing = 0.1;
    c.options.z_loss = 1e-4;
  });
  add("minus_inf_entries", [](Case& c) {
    c.neg_inf_entries = true;
    c.options.z_loss = 1e-3;
  });
  add("minus_inf_shard", [](Case& c) { c.neg_inf_shard = true; });
  add("minus_inf_shard_smoothing", [](Case& c) {
    c.neg_inf_shard = true;  // the loss is +inf (mass on impossible tokens), the gradient stays finite
    c.options.label_smoothing = 0.1;
  });
  add("all_masked", [](Case& c) {
    c.mask_every = -1;
    c.options.label_smoothing = 0.1;
  });
  add("single_row_vocab_8", [](Case& c) {
    c.rows = 1;
    c.mask_every = 0;
    c.vocab_local = 8;
  });
  return cases;
}

inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

}  // namespace retort::ce_testing
