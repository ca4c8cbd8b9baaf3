#pragma once
// Shared by the vocab-parallel cross-entropy tests: problems over a GLOBAL vocabulary, the float64 dense
// reference (loss and full gradient, from the explicit target distribution rather than the op's closed form),
// a runner that splits the columns over tp thread ranks and returns every rank's loss and LOCAL gradient, and
// a communicator wrapper that counts collectives (and lets GPU tensors ride a Gloo group through the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "parallel/comm/thread_ranks.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::ce_testing {

using losses::CrossEntropyOptions;
using losses::LabelSmoothingConvention;
using losses::Reduction;

constexpr double kInf = std::numeric_limits<double>::infinity();

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

// The values a tensor of `dtype` actually holds, so the reference sees the op's inputs exactly.
inline std::vector<double> stored(const std::vector<double>& values, DType dtype) {
  return Tensor::from_doubles(values, {static_cast<int64_t>(values.size())}, dtype).to_doubles();
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

// Columns [rank * V_local, (rank + 1) * V_local) of a [rows, vocab] matrix.
inline std::vector<double> column_slice(const std::vector<double>& dense, const Problem& p, int rank) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(p.rows * p.vocab_local));
  for (int64_t i = 0; i < p.rows; ++i) {
    const double* row = dense.data() + i * p.vocab + rank * p.vocab_local;
    out.insert(out.end(), row, row + p.vocab_local);
  }
  return out;
}

// Forwards to a real group and records every collective. Over Gloo, a GPU tensor travels through the host,
// so GPU losses can run at tp > 1 as thread ranks sharing a single GPU.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  struct Call {
    ReduceOp op;
    Shape shape;
  };
  const std::vector<Call>& calls() const { return calls_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend() const override { return inner_->backend(); }
  const std::string& name() const override { return inner_->name(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void all_reduce(Tensor& tensor, ReduceOp op) override {
    calls_.push_back({op, tensor.shape()});
    if (tensor.device().is_cpu() || inner_->backend() != "gloo") return inner_->all_reduce(tensor, op);
    Tensor host = tensor.to(Device::cpu());
    inner_->all_reduce(host, op);
    tensor.copy_(host);
  }
  void broadcast(Tensor&, int) override { unused("broadcast"); }
  void barrier() override { inner_->barrier(); }
  std::shared_ptr<Communicator> split(int, int) override { unused("split"); }

 protected:
  void all_gather_flat(const Tensor&, Tensor&) override { unused("all_gather"); }
  void reduce_scatter_flat(const Tensor&, Tensor&, ReduceOp) override { unused("reduce_scatter"); }
  void check_signatures(const CollectiveSignature&) override {}

 private:
  [[noreturn]] static void unused(const char* what) {
    throw Error(std::string("RecordingCommunicator: the cross-entropy should not call ") + what);
  }
  std::shared_ptr<Communicator> inner_;
  std::vector<Call> calls_;
};

struct RankResult {
  double loss = 0;
  std::vector<double> grad;  // this rank's local gradient, [rows, V_local]
  std::vector<RecordingCommunicator::Call> forward_calls, backward_calls;
};

inline GlooOptions test_gloo_options() {
  GlooOptions o;
  o.timeout = std::chrono::seconds(60);
  return o;
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
  auto body = [&](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo ? gloo->rank() : 0;
    const Device device = run.nccl ? Device::cuda(rank) : base_device;
    std::shared_ptr<Communicator> transport = gloo;
#ifdef RETORT_WITH_CUDA
    if (run.nccl) transport = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
#endif
    const Shape shape = c.three_d ? Shape{2, p.rows / 2, p.vocab_local} : Shape{p.rows, p.vocab_local};
    const Shape leading(shape.begin(), shape.end() - 1);
    Tensor logits = Tensor::from_doubles(column_slice(p.logits, p, rank), shape, dtype, device);
    Tensor targets = Tensor::from_ints(p.targets, leading, run.device_targets ? device : Device::cpu());
    CrossEntropyOptions options = c.options;
    std::shared_ptr<RecordingCommunicator> group;
    if (transport) {
      group = std::make_shared<RecordingCommunicator>(transport);
      if (run.group_in_options) {
        options.group = group;
      } else {
        logits.set_sharding({static_cast<int>(shape.size()) - 1, 1, group});
      }
    }
    logits.set_requires_grad();
    Tensor loss = losses::cross_entropy(logits, targets, options);
    RankResult& out = results[static_cast<size_t>(rank)];
    out.loss = loss.item();
    if (group) out.forward_calls = group->calls();
    loss.backward();
    out.grad = logits.grad().to_doubles();
    if (group)
      out.backward_calls.assign(group->calls().begin() + static_cast<ptrdiff_t>(out.forward_calls.size()),
                                group->calls().end());
  };
  if (tp == 1) {
    body(nullptr);
  } else {
    run_ranks(tp, body, test_gloo_options());
  }
  return results;
}

// max |a - e| / max |e| over the finite entries; an entry that is finite on one side only counts as infinite.
inline double scaled_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double scale = 0, worst = 0;
  for (double e : expected) scale = std::max(scale, std::isfinite(e) ? std::abs(e) : 0.0);
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    if (actual[i] == expected[i]) continue;
    worst = std::max(worst,
                     std::isfinite(actual[i]) && std::isfinite(expected[i]) ? std::abs(actual[i] - expected[i]) : kInf);
  }
  return scale > 0 ? worst / scale : worst;
}

// |a - e| / max(|e|, 1): relative for losses of any size, absolute near 0; equal infinities give 0.
inline double loss_error(double actual, double expected) {
  if (actual == expected) return 0;
  if (!std::isfinite(actual) || !std::isfinite(expected)) return kInf;
  return std::abs(actual - expected) / std::max(std::abs(expected), 1.0);
}

// The worst errors seen per label, printed once at the end of the run (the report quotes them).
class ErrorLog {
 public:
  static ErrorLog& get() {
    static ErrorLog log;
    return log;
  }
  void note(const std::string& label, double loss_err, double grad_err) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& [l, g] = worst_[label];
    l = std::max(l, loss_err);
    g = std::max(g, grad_err);
  }
  void print() const {
    for (const auto& [label, e] : worst_)
      std::printf("[ce max errors] %-28s loss %.3g  grad %.3g\n", label.c_str(), e.first, e.second);
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::pair<double, double>> worst_;
};

struct Tolerance {
  double loss, grad;
};

// Stated once for every comparison against the float64 reference (observed worst cases in the report).
// f64: rounding only. f32: exact inputs, float32 math (~1e-7 observed); with logits x1000 the gradient rebuilds
// q_j = exp(x_j - lse) from an f32 lse near 1e4 whose ulp is ~1e-3, so a token with sizeable probability may
// be off by that much relative. bf16: the gradient is stored in bf16, whose unit roundoff is 2^-8 = 3.9e-3.
// The GPU sums exp in float (the CPU in double) with an online max, hence its looser float32 bounds; not yet
// measured on a GPU, so they are set from the float32 error analysis (S of ~4k terms: ~1e-6 relative).
inline Tolerance tolerance_for(DType dtype, const Case& c, Device device = Device::cpu()) {
  const bool huge = c.scale >= 1000, gpu = device.is_cuda();
  switch (dtype) {
    case DType::F64:
      return {1e-12, 1e-11};
    case DType::F32:
      return {gpu ? 4e-6 : 5e-7, huge ? 1e-3 : gpu ? 1e-5 : 2e-6};
    default:
      return {gpu ? 4e-6 : 5e-7, huge ? 5e-3 : gpu ? 5e-3 : 4e-3};
  }
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
    EXPECT_LE(le, tol.loss) << "rank " << r << ": loss " << got.loss << ", reference " << ref.loss;
    EXPECT_LE(ge, tol.grad) << "rank " << r << ": local gradient";
    EXPECT_EQ(got.loss, results[0].loss) << "rank " << r << " disagrees with rank 0";
    for (double g : got.grad) ASSERT_FALSE(std::isnan(g)) << "rank " << r << ": NaN in the gradient";
    ErrorLog::get().note(label + " " + std::string(dtype_name(dtype)) + (c.scale >= 1000 ? " x1000" : ""), le, ge);
    if (tp > 1) {
      ASSERT_EQ(got.forward_calls.size(), 2u) << "rank " << r;
      EXPECT_EQ(got.forward_calls[0].op, ReduceOp::Max);
      EXPECT_EQ(got.forward_calls[0].shape, (Shape{p.rows}));
      EXPECT_EQ(got.forward_calls[1].op, ReduceOp::Sum);
      EXPECT_EQ(got.forward_calls[1].shape, (Shape{p.rows, c.options.label_smoothing > 0 ? 3 : 2}));
      EXPECT_TRUE(got.backward_calls.empty()) << "rank " << r << ": the backward ran a collective";
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
