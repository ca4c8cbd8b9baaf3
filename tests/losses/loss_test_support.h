#pragma once
// The primitives of the vocab-parallel loss tests (cross-entropy, distribution and top-k distillation): values as
// a dtype stores them, column shards of dense matrices, a communicator wrapper that counts collectives (and lets
// GPU tensors ride a Gloo group through the host), the thread-rank runner, the error measures and the per-label
// log of worst errors. The checks built on them, the same for every loss family, are in loss_family_harness.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "parallel/comm/thread_ranks.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::loss_testing {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values a tensor of `dtype` actually holds, so the reference sees the op's inputs exactly.
inline std::vector<double> stored(const std::vector<double>& values, DType dtype) {
  return Tensor::from_doubles(values, {static_cast<int64_t>(values.size())}, dtype).to_doubles();
}

// Columns [rank * V_local, (rank + 1) * V_local) of a [rows, vocab] matrix (p: rows, vocab, vocab_local). A shard
// that reaches past the vocabulary (a padded last shard: V_local = ceil(vocab / tp)) holds `padding` there: NaN
// for inputs (a loss that read it would show it), 0 for the expected gradient.
template <typename Problem>
std::vector<double> column_slice(const std::vector<double>& dense, const Problem& p, int rank,
                                 double padding = std::numeric_limits<double>::quiet_NaN()) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(p.rows * p.vocab_local));
  const int64_t start = rank * p.vocab_local;
  const int64_t real = std::clamp<int64_t>(p.vocab - start, 0, p.vocab_local);
  for (int64_t i = 0; i < p.rows; ++i) {
    const double* row = dense.data() + i * p.vocab + start;
    out.insert(out.end(), row, row + real);
    out.insert(out.end(), static_cast<size_t>(p.vocab_local - real), padding);
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
  // The gold loss gathers each rank's top candidates (the other losses never gather).
  void all_gather_flat(const Tensor& input, Tensor& output) override {
    calls_.push_back({ReduceOp::Sum, output.shape()});  // recorded with its output's shape
    const bool staged = !input.device().is_cpu() && inner_->backend() == "gloo";
    const Tensor gathered = inner_->all_gather(staged ? input.to(Device::cpu()) : input, 0);
    output.copy_(staged ? gathered.to(output.device()) : gathered);
  }
  void reduce_scatter_flat(const Tensor&, Tensor&, ReduceOp) override { unused("reduce_scatter"); }
  void check_signatures(const CollectiveSignature&) override {}

 private:
  [[noreturn]] static void unused(const char* what) {
    throw Error(std::string("RecordingCommunicator: a vocab-parallel loss should not call ") + what);
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

// Calls body(rank, device, transport) on each of `tp` ranks: at tp 1 once, with no transport at all; above, on
// Gloo thread ranks, each on `base_device`, or (nccl) rank r on cuda:r over NCCL.
template <typename Body>
void on_ranks(int tp, Device base_device, bool nccl, Body&& body) {
  auto rank_body = [&](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo ? gloo->rank() : 0;
    const Device device = nccl ? Device::cuda(rank) : base_device;
    std::shared_ptr<Communicator> transport = gloo;
#ifdef RETORT_WITH_CUDA
    if (nccl) transport = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
#endif
    body(rank, device, transport);
  };
  if (tp == 1) {
    rank_body(nullptr);
  } else {
    run_ranks(tp, rank_body, test_gloo_options());
  }
}

// The group a rank's loss reduces over: `transport` wrapped so its collectives are recorded, handed to the loss
// in its options (group_in_options) or on the sharding of the logits' last dim. Null without a transport.
inline std::shared_ptr<RecordingCommunicator> record_group(const std::shared_ptr<Communicator>& transport,
                                                           bool group_in_options, Tensor& logits,
                                                           std::shared_ptr<Communicator>& options_group) {
  if (!transport) return nullptr;
  auto group = std::make_shared<RecordingCommunicator>(transport);
  if (group_in_options) {
    options_group = group;
  } else {
    logits.set_sharding({logits.ndim() - 1, 1, group});
  }
  return group;
}

// Runs the backward of a rank's scalar `loss`; returns the loss, the gradient of `logits` and the collectives
// the forward and the backward ran on `group` (when there is one).
inline RankResult finish_rank(Tensor& loss, const Tensor& logits, const RecordingCommunicator* group) {
  RankResult out;
  out.loss = loss.item();
  if (group) out.forward_calls = group->calls();
  loss.backward();
  out.grad = logits.grad().to_doubles();
  if (group)
    out.backward_calls.assign(group->calls().begin() + static_cast<ptrdiff_t>(out.forward_calls.size()),
                              group->calls().end());
  return out;
}

// One rank's run of a loss: its logits are its column slice of `dense` (p: rows, vocab, vocab_local) shaped
// [rows, V_local], or [2, rows / 2, V_local] when three_d, stored as `dtype` on `device`; the recorded group (when
// there is a transport) goes on their sharding or, group_in_options, into options.group; loss_of(logits, options)
// computes the loss. Returns the loss, the LOCAL gradient and the collectives.
template <typename Problem, typename Options, typename LossOf>
RankResult run_rank(const Problem& p, const std::vector<double>& dense, bool three_d, int rank, DType dtype,
                    Device device, const std::shared_ptr<Communicator>& transport, bool group_in_options,
                    Options options, LossOf&& loss_of) {
  const Shape shape = three_d ? Shape{2, p.rows / 2, p.vocab_local} : Shape{p.rows, p.vocab_local};
  Tensor logits = Tensor::from_doubles(column_slice(dense, p, rank), shape, dtype, device);
  const auto group = record_group(transport, group_in_options, logits, options.group);
  if (group && !group_in_options) {
    ShardingSpec spec = logits.sharding();
    spec.full_extent = p.vocab;  // the shards may end in padding
    logits.set_sharding(spec);
  }
  logits.set_requires_grad();
  Tensor loss = loss_of(logits, options);
  return finish_rank(loss, logits, group.get());
}

// A [rows, vocab_local] f64 shard of logits split over `group` on its last dim.
inline Tensor sharded_f64(const std::vector<double>& values, int64_t rows, int64_t vocab_local,
                          const std::shared_ptr<Communicator>& group) {
  Tensor t = Tensor::from_doubles(values, {rows, vocab_local}, DType::F64);
  t.set_sharding({1, 1, group});
  return t;
}

// The largest |a - e| over the entries (an entry finite on one side only counts as infinite) and the scale it
// is measured on: the larger of `floor` and the largest finite |e|.
struct Difference {
  double worst = 0, scale = 0;
};
inline Difference max_difference(const std::vector<double>& actual, const std::vector<double>& expected, double floor) {
  EXPECT_EQ(actual.size(), expected.size());
  Difference d{0, floor};
  for (double e : expected) d.scale = std::max(d.scale, std::isfinite(e) ? std::abs(e) : 0.0);
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    if (actual[i] == expected[i]) continue;
    d.worst = std::max(
        d.worst, std::isfinite(actual[i]) && std::isfinite(expected[i]) ? std::abs(actual[i] - expected[i]) : kInf);
  }
  return d;
}

// max |a - e| over the entries, relative to the larger of max |e| and `unit` (the size of the gradient when a
// token's probability moves by one: where every true entry is ~0, as for the reverse KL of one-hot rows, the
// error is measured on that scale; unit 0 measures on max |e| alone, and on nothing when every |e| is 0); an
// entry finite on one side only counts as infinite.
inline double grad_error(const std::vector<double>& actual, const std::vector<double>& expected, double unit = 0) {
  const Difference d = max_difference(actual, expected, unit);
  return d.scale > 0 ? d.worst / d.scale : d.worst;
}

// |a - e| / max(|e|, 1): relative for losses of any size, absolute near 0; equal infinities give 0.
inline double loss_error(double actual, double expected) {
  if (actual == expected) return 0;
  if (!std::isfinite(actual) || !std::isfinite(expected)) return kInf;
  return std::abs(actual - expected) / std::max(std::abs(expected), 1.0);
}

// The worst errors seen per label, printed once at the end of the run (the report quotes them). Tag::kLogName
// names the log in its lines, Tag::kLogWidth is the width of the label column.
template <typename Tag>
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
      std::printf("[%s max errors] %-*s loss %.3g  grad %.3g\n", Tag::kLogName, Tag::kLogWidth, label.c_str(), e.first,
                  e.second);
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::pair<double, double>> worst_;
};

// Prints Log::get() when the whole run ends: register with ::testing::AddGlobalTestEnvironment.
template <typename Log>
class PrintErrorLog : public ::testing::Environment {
 public:
  void TearDown() override { Log::get().print(); }
};

struct Tolerance {
  double loss, grad;
};

// The scenario called `name` in a loss's reference_cases(); a name that is gone fails the test instead of
// silently checking nothing.
template <typename Case>
Case case_named(const std::vector<Case>& cases, const std::string& name) {
  for (const Case& c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "no reference case named " << name;
  return cases.front();
}

// A loss's tolerances against the float64 reference by the logits' dtype: f64 (rounding only) is the same for
// every loss, f32 and the 16-bit dtypes are the loss's own.
inline Tolerance tolerance_by_dtype(DType dtype, Tolerance f32, Tolerance bf16) {
  switch (dtype) {
    case DType::F64:
      return {1e-12, 1e-11};
    case DType::F32:
      return f32;
    default:
      return bf16;
  }
}

// A family's dense float64 reference for one loss setting: the loss and the gradient over the whole vocabulary.
struct Reference {
  double loss = 0;
  std::vector<double> grad;  // dense [rows, vocab]
  double grad_unit = 0;      // the floor grad_error measures on (0: max |g| alone)
};

}  // namespace retort::loss_testing
