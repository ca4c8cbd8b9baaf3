#pragma once
// One harness for the vocab-parallel loss families: the cross-entropy (cross_entropy_family.h), the
// distribution (KD) losses (distribution_loss_family.h) and the top-k distillation losses
// (topk_distillation_family.h). A family is a traits struct that says only what is its own: its scenarios, how
// a problem's inputs are drawn, its float64 reference written from the definitions, how the op is called, and its
// tolerances. Every check below runs any family through the same code: each tp rank's loss and LOCAL gradient
// against the dense float64 reference (Gloo thread ranks, or NCCL), central finite differences, the PyTorch
// oracle (torch_oracle.h), the tape-free entry points, where the group comes from, and CUDA against the CPU.
//
// A family F provides:
//   types    Case (name, rows, vocab_local, scale, three_d, options), Problem (rows, vocab, vocab_local),
//            Options (with .group), Inputs (the op's inputs besides the logits), Log (its ErrorLog);
//   names    kTypeName (typed tests), kName (parameter prefix), kLogPrefix (error-log labels), kSideInput (the
//            floating input beside the logits whose dtype a run sets: "teacher", "cache", or "" for none),
//            kLogName and kLogWidth (its ErrorLog's name and label column);
//   problems reference_cases(), problem_for(c, tp, options), jobs_for(c, tp) -> CaseJobs<F>, logits(p),
//            valid_rows(c, p), fd_probes(p);
//   the op   side_dtype(c, dtype), inputs(c, p, rank, logits_shape, side_dtype, Placement), loss(logits, inputs,
//            options), forward(logits, inputs, options) -> {loss, saved}, backward(logits, inputs, saved,
//            grad_output, buffer, accumulate);
//   checking reference_for(c, p, options, dtype, side_dtype) -> Reference, tolerance_for(dtype, c, device),
//            collective_shapes(p, options) -> {MAX shape, SUM shape}, job_label(options), job_tag(options);
//   and the scenarios of the checks below that are not reference cases (see each check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "loss_test_support.h"
#include "losses/vocab_parallel.h"
#include "parallel/comm/thread_ranks.h"
#include "tests/test_support.h"

namespace retort::loss_testing {

// ---- scenarios ------------------------------------------------------------------------------------------------------

// A default Case named `name`, changed by tweak(c).
template <typename Case, typename Tweak>
Case make_case(std::string name, Tweak&& tweak) {
  Case c;
  c.name = std::move(name);
  tweak(c);
  return c;
}

// A family's list of scenarios: each the default Case with the list's `base` change and then its own applied.
template <typename Case>
class CaseList {
 public:
  CaseList() = default;
  explicit CaseList(std::function<void(Case&)> base) : base_(std::move(base)) {}

  template <typename Tweak>
  CaseList& add(std::string name, Tweak&& tweak) {
    cases_.push_back(make_case<Case>(std::move(name), [&](Case& c) {
      if (base_) base_(c);
      tweak(c);
    }));
    return *this;
  }
  const std::vector<Case>& list() const { return cases_; }

 private:
  std::function<void(Case&)> base_;
  std::vector<Case> cases_;
};

// The denominator a loss divides its sum by: the normalizer when set, 1 for the sum, else the valid rows (at
// least one).
template <typename Options>
double denominator_of(const Options& o, int64_t valid_rows) {
  if (o.normalizer) return *o.normalizer;
  if (o.reduction == decltype(o.reduction)::Sum) return 1.0;
  return static_cast<double>(std::max<int64_t>(valid_rows, 1));
}

// ---- jobs and runs ----------------------------------------------------------------------------------------------

// One loss setting of a batch run in the same group: the options and the problem they are checked on.
template <typename F>
struct Job {
  typename F::Options options;
  const typename F::Problem* problem = nullptr;
};

// The jobs of a case and the problems they point into; a list, so the problems keep their addresses when the
// whole moves (it is never copied).
template <typename F>
struct CaseJobs {
  std::list<typename F::Problem> problems;
  std::vector<Job<F>> jobs;

  CaseJobs() = default;
  CaseJobs(CaseJobs&&) noexcept = default;
  CaseJobs& operator=(CaseJobs&&) noexcept = default;
  CaseJobs(const CaseJobs&) = delete;
  CaseJobs& operator=(const CaseJobs&) = delete;

  const typename F::Problem& add_problem(typename F::Problem p) {
    problems.push_back(std::move(p));
    return problems.back();
  }
  void add_job(const typename F::Options& options, const typename F::Problem& problem) {
    jobs.push_back({options, &problem});
  }
};

// One job per options entry, each on the problem its options draw (F::problem_for) at `tp`.
template <typename F>
CaseJobs<F> jobs_with_options(const typename F::Case& c, int tp, const std::vector<typename F::Options>& options) {
  CaseJobs<F> out;
  for (const auto& o : options) out.add_job(o, out.add_problem(F::problem_for(c, tp, o)));
  return out;
}

struct RunOptions {
  bool group_in_options = false;  // pass the group as options.group instead of on the logits' sharding
  bool inputs_on_device = true;   // targets, labels and the top-k cache on the logits' device (else on the host)
  bool nccl = false;              // rank r on cuda:r over NCCL (the device must be a GPU)
};

// Where a rank's inputs go: the logits' device, and whether the integer-side inputs (targets, labels, the top-k
// cache) are there too or on the host. side_row_offset > 0 stores a teacher as rows [offset, offset + rows) of a
// padded buffer, so that it does not start where a fresh tensor does (the misaligned-view checks).
struct Placement {
  Device device = Device::cpu();
  bool on_device = true;
  int64_t side_row_offset = 0;

  Device inputs_device() const { return on_device ? device : Device::cpu(); }
};

// Rows [offset, offset + rows) of a [rows + offset, cols] tensor whose first rows hold 0.25: with an odd number
// of columns its data does not start on a 16-byte boundary. A CPU copy is made contiguous at its own start.
inline Tensor padded_rows(const std::vector<double>& values, int64_t rows, int64_t cols, int64_t offset, DType dtype,
                          Device device) {
  if (offset == 0) return Tensor::from_doubles(values, {rows, cols}, dtype, device);
  std::vector<double> padded(static_cast<size_t>(offset * cols), 0.25);
  padded.insert(padded.end(), values.begin(), values.end());
  Tensor view = Tensor::from_doubles(padded, {rows + offset, cols}, dtype, device).rows(offset, rows);
  return device.is_cpu() ? view.clone() : view;
}

// Runs every job on `tp` ranks (no group at all at tp 1) with each rank's logits shard stored as `dtype` and the
// side input as `side` on `base_device`; returns [job][rank] the loss, the LOCAL gradient and the collectives.
template <typename F>
std::vector<std::vector<RankResult>> run_tp(const typename F::Case& c, const std::vector<Job<F>>& jobs, int tp,
                                            DType dtype, DType side, Device base_device, RunOptions run = {}) {
  std::vector<std::vector<RankResult>> results(jobs.size(), std::vector<RankResult>(static_cast<size_t>(tp)));
  on_ranks(tp, base_device, run.nccl, [&](int rank, Device device, std::shared_ptr<Communicator> transport) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      const typename F::Problem& p = *jobs[k].problem;
      results[k][static_cast<size_t>(rank)] =
          run_rank(p, F::logits(p), c.three_d, rank, dtype, device, transport, run.group_in_options, jobs[k].options,
                   [&](const Tensor& logits, const typename F::Options& options) {
                     const auto inputs = F::inputs(c, p, rank, logits.shape(), side, {device, run.inputs_on_device});
                     return F::loss(logits, inputs, options);
                   });
    }
  });
  return results;
}

// ---- labels -----------------------------------------------------------------------------------------------------

inline std::string dtype_str(DType dtype) {
  return std::string(dtype_name(dtype));
}

// "f32", or "f32/bf16" when the side input is stored in another dtype than the logits.
inline std::string dtypes_str(DType dtype, DType side) {
  return dtype == side ? dtype_str(dtype) : dtype_str(dtype) + "/" + dtype_str(side);
}

// The line of F's error log a comparison is noted under: the family's prefix, the check, the job's tag, the
// dtypes, and whether the logits are x1000.
template <typename F>
std::string log_label(const std::string& label, const typename F::Options& o, DType dtype, DType side,
                      const typename F::Case& c) {
  const std::string tag = F::job_tag(o);
  return std::string(F::kLogPrefix) + label + (tag.empty() ? "" : " " + tag) + " " + dtypes_str(dtype, side) +
         (c.scale >= 1000 ? " x1000" : "");
}

template <typename F>
std::string dtypes_trace(DType dtype, DType side) {
  if (std::string(F::kSideInput).empty()) return dtype_str(dtype);
  return "logits " + dtype_str(dtype) + " " + F::kSideInput + " " + dtype_str(side);
}

// ---- one rank against the reference ------------------------------------------------------------------------------

// One rank against the reference: its loss and LOCAL gradient errors (le, ge) within `tol`, the same loss as
// rank 0 (`first`), no NaN in the gradient. False after a failure that ends the comparison.
[[nodiscard]] inline bool expect_rank_close(int r, const RankResult& got, const RankResult& first, double ref_loss,
                                            double le, double ge, const Tolerance& tol) {
  EXPECT_LE(le, tol.loss) << "rank " << r << ": loss " << got.loss << ", reference " << ref_loss;
  EXPECT_LE(ge, tol.grad) << "rank " << r << ": local gradient";
  EXPECT_EQ(got.loss, first.loss) << "rank " << r << " disagrees with rank 0";
  for (double g : got.grad) {
    if (!std::isnan(g)) continue;
    ADD_FAILURE() << "rank " << r << ": NaN in the gradient";
    return false;
  }
  return true;
}

// At tp > 1 the forward ran exactly one MAX all-reduce of `max_shape` and one SUM all-reduce of `sum_shape`,
// the backward none; at tp 1, nothing to check. False after a failure that ends the comparison.
[[nodiscard]] inline bool expect_collectives(int r, int tp, const RankResult& got, const Shape& max_shape,
                                             const Shape& sum_shape) {
  if (tp == 1) return true;
  EXPECT_EQ(got.forward_calls.size(), 2u) << "rank " << r;
  if (got.forward_calls.size() != 2) return false;
  EXPECT_EQ(got.forward_calls[0].op, ReduceOp::Max);
  // The row maxima, flattened, followed by the shard-width and vocabulary check (vocab_parallel::reduce_partials).
  EXPECT_EQ(got.forward_calls[0].shape, (Shape{shape_numel(max_shape) + losses::vocab_parallel::kShardCheckValues}));
  EXPECT_EQ(got.forward_calls[1].op, ReduceOp::Sum);
  EXPECT_EQ(got.forward_calls[1].shape, sum_shape);
  EXPECT_TRUE(got.backward_calls.empty()) << "rank " << r << ": the backward ran a collective";
  return true;
}

// Every job of case `c` on `tp` ranks, the logits stored as `dtype` and the side input as `side` on `device`:
// every rank's loss equals the dense reference and its LOCAL gradient equals its column slice of the dense
// gradient, within F's tolerance; the forward ran exactly one MAX and one SUM all-reduce of F's shapes at tp > 1
// (none at tp 1), the backward none. The errors go to F's log under `label`.
template <typename F>
void expect_matches_reference(const typename F::Case& c, int tp, DType dtype, DType side, Device device,
                              const std::string& label, RunOptions run = {}) {
  SCOPED_TRACE(c.name + " tp " + std::to_string(tp) + " " + dtypes_trace<F>(dtype, side) + " on " + device.str() +
               (run.nccl ? " over NCCL" : ""));
  const CaseJobs<F> cj = F::jobs_for(c, tp);
  const auto results = run_tp<F>(c, cj.jobs, tp, dtype, side, device, run);
  const Tolerance tol = F::tolerance_for(dtype, c, device);
  for (size_t k = 0; k < cj.jobs.size(); ++k) {
    const Job<F>& job = cj.jobs[k];
    const typename F::Problem& p = *job.problem;
    SCOPED_TRACE(F::job_label(job.options));
    const Reference ref = F::reference_for(c, p, job.options, dtype, side);
    const auto [max_shape, sum_shape] = F::collective_shapes(p, job.options);
    for (int r = 0; r < tp; ++r) {
      const RankResult& got = results[k][static_cast<size_t>(r)];
      const double le = loss_error(got.loss, ref.loss);
      const double ge = grad_error(got.grad, column_slice(ref.grad, p, r), ref.grad_unit);
      if (!expect_rank_close(r, got, results[k][0], ref.loss, le, ge, tol)) return;
      F::Log::get().note(log_label<F>(label, job.options, dtype, side, c), le, ge);
      if (!expect_collectives(r, tp, got, max_shape, sum_shape)) return;
    }
  }
}

// The same with the side input in the family's own dtype for `dtype` logits.
template <typename F>
void expect_matches_reference(const typename F::Case& c, int tp, DType dtype, Device device, const std::string& label,
                              RunOptions run = {}) {
  expect_matches_reference<F>(c, tp, dtype, F::side_dtype(c, dtype), device, label, run);
}

// ---- suites over every family ----------------------------------------------------------------------------------

// One reference case of any family, for the parameterized suites that run every family's cases through one test.
struct FamilyCase {
  std::string name;  // family prefix and case name: the test's parameter name
  std::function<void(int tp, DType dtype, Device device, const std::string& label, const RunOptions& run)>
      expect_matches_reference;
};

template <typename F>
std::vector<FamilyCase> family_cases(const std::vector<typename F::Case>& cases) {
  std::vector<FamilyCase> out;
  for (const auto& c : cases)
    out.push_back({std::string(F::kName) + "_" + c.name,
                   [c](int tp, DType dtype, Device device, const std::string& label, const RunOptions& run) {
                     expect_matches_reference<F>(c, tp, dtype, device, label, run);
                   }});
  return out;
}

// A named check of any family (finite differences, the PyTorch oracle): one parameter of a suite over them all.
struct NamedCheck {
  std::string name;
  std::function<void()> run;
};

inline void PrintTo(const FamilyCase& c, std::ostream* out) {
  *out << c.name;
}
inline void PrintTo(const NamedCheck& c, std::ostream* out) {
  *out << c.name;
}

template <typename Param>
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return info.param.name;
}

template <typename T>
std::vector<T> concat(std::vector<std::vector<T>> parts) {
  std::vector<T> out;
  for (auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// ---- finite differences ------------------------------------------------------------------------------------------

// Central finite differences against this rank's analytic LOCAL gradient `grad` at tp > 1: for each probe (row,
// global column) the owner of that logit moves it by +-h in its shard `local` ([rows, vocab_local]) while every
// rank recomputes the collective loss_at(values); the owner expects its gradient within 1e-8 of the quotient.
// Returns the worst error over this rank's probes.
template <typename LossAt>
double expect_finite_differences(int rank, int64_t vocab_local, const std::vector<double>& local,
                                 const std::vector<double>& grad,
                                 const std::vector<std::pair<int64_t, int64_t>>& probes, LossAt&& loss_at) {
  const double h = 1e-5;
  double worst = 0;
  for (const auto& [i, j] : probes) {
    const bool mine = j / vocab_local == rank;
    const size_t at = static_cast<size_t>(i * vocab_local + j % vocab_local);
    std::vector<double> plus = local, minus = local;
    if (mine) plus[at] += h, minus[at] -= h;
    const double fd = (loss_at(plus) - loss_at(minus)) / (2 * h);
    if (!mine) continue;
    EXPECT_NEAR(grad[at], fd, 1e-8) << "row " << i << ", global column " << j;
    worst = std::max(worst, std::abs(grad[at] - fd));
  }
  return worst;
}

// The analytic LOCAL gradient of options `o` on problem `p` against central finite differences of the loss, in
// float64, at tp 2: the owner of a logit perturbs it, both ranks recompute the (collective) forward, and the
// owner compares, at F's probes (both shards, the columns the loss singles out, finite logits only).
template <typename F>
void expect_finite_differences_match(const typename F::Case& c, const typename F::Problem& p,
                                     const typename F::Options& o) {
  SCOPED_TRACE(c.name + " " + F::job_label(o));
  constexpr int tp = 2;
  const std::vector<std::pair<int64_t, int64_t>> probes = F::fd_probes(p);
  run_ranks(
      tp,
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Shape shape{p.rows, p.vocab_local};
        const auto inputs = F::inputs(c, p, rank, shape, DType::F64, {});
        const std::vector<double> local = column_slice(F::logits(p), p, rank);
        auto loss_at = [&](const std::vector<double>& values) {
          return F::forward(sharded_f64(values, p.rows, p.vocab_local, group), inputs, o).loss.item();
        };
        Tensor logits = sharded_f64(local, p.rows, p.vocab_local, group);
        logits.set_requires_grad();
        F::loss(logits, inputs, o).backward();
        const std::vector<double> grad = logits.grad().to_doubles();
        const double worst = expect_finite_differences(rank, p.vocab_local, local, grad, probes, loss_at);
        const std::string tag = F::job_tag(o);
        F::Log::get().note(std::string(F::kLogPrefix) + "finite differences f64" + (tag.empty() ? "" : " " + tag), 0,
                           worst);
      },
      test_gloo_options());
}

// A family's finite-difference scenario: runs of (case, options), each on the problem its options draw at tp 2.
template <typename F>
struct FiniteDifferenceScenario {
  std::string name;
  std::vector<std::pair<typename F::Case, typename F::Options>> runs;
};

template <typename F>
std::vector<NamedCheck> finite_difference_checks() {
  std::vector<NamedCheck> out;
  for (const FiniteDifferenceScenario<F>& s : F::finite_difference_scenarios())
    out.push_back({std::string(F::kName) + "_" + s.name, [s] {
                     for (const auto& [c, o] : s.runs)
                       expect_finite_differences_match<F>(c, F::problem_for(c, 2, o), o);
                   }});
  return out;
}

// ---- the tape-free entry points ------------------------------------------------------------------------------------

// The whole problem of a job at tp 1 as one [rows, vocab] tensor.
template <typename F>
Tensor whole_logits(const typename F::Problem& p, DType dtype, Device device = Device::cpu()) {
  return Tensor::from_doubles(F::logits(p), {p.rows, p.vocab}, dtype, device);
}

template <typename F>
typename F::Inputs whole_inputs(const typename F::Case& c, const typename F::Problem& p, DType side,
                                Device device = Device::cpu()) {
  return F::inputs(c, p, 0, {p.rows, p.vocab}, side, {device});
}

// The forward records nothing; the backward into a buffer equals the autograd gradient, the loss the autograd
// loss (f32, the side input f32) on every fused job of F.
template <typename F>
void expect_backward_into_a_buffer_equals_autograd() {
  const typename F::Case c = F::fused_case();
  const CaseJobs<F> cj = F::fused_jobs(c);
  for (const Job<F>& job : cj.jobs) {
    SCOPED_TRACE(F::job_label(job.options));
    const auto& p = *job.problem;
    const auto inputs = whole_inputs<F>(c, p, DType::F32);
    Tensor logits = whole_logits<F>(p, DType::F32);
    const auto forward = F::forward(logits, inputs, job.options);
    EXPECT_FALSE(forward.loss.requires_grad());
    Tensor buffer = Tensor::empty(logits.shape(), DType::F32);
    F::backward(logits, inputs, forward.saved, Tensor(), buffer, false);

    logits.set_requires_grad();
    Tensor loss = F::loss(logits, inputs, job.options);
    EXPECT_EQ(loss.item(), forward.loss.item());
    loss.backward();
    EXPECT_EQ(buffer.to_doubles(), logits.grad().to_doubles());
  }
}

// bf16 logits into an f32 buffer: the gradient is not rounded to bf16, so it matches the reference to f32
// (within F::kF32BufferTolerance).
template <typename F>
void expect_f32_buffer_for_bf16_logits() {
  const typename F::Case c = F::fused_case();
  const CaseJobs<F> cj = F::fused_jobs(c);
  const DType side = F::side_dtype(c, DType::BF16);
  for (const Job<F>& job : cj.jobs) {
    SCOPED_TRACE(F::job_label(job.options));
    const auto& p = *job.problem;
    const Tensor logits = whole_logits<F>(p, DType::BF16);
    const auto inputs = whole_inputs<F>(c, p, side);
    const auto forward = F::forward(logits, inputs, job.options);
    Tensor buffer = Tensor::empty(logits.shape(), DType::F32);
    F::backward(logits, inputs, forward.saved, Tensor(), buffer, false);
    const Reference ref = F::reference_for(c, p, job.options, DType::BF16, side);
    const double err = grad_error(buffer.to_doubles(), ref.grad, ref.grad_unit);
    EXPECT_LE(err, F::kF32BufferTolerance);
    const std::string tag = F::job_tag(job.options);
    F::Log::get().note(std::string(F::kLogPrefix) + "cpu bf16 logits, f32 grad" + (tag.empty() ? "" : " " + tag), 0,
                       err);
  }
}

// Two accumulating backward passes with grad_output 2 into an f64 buffer that held 0.5: 0.5 + 4 g on the valid
// rows (within 1e-12 of the reference), the masked rows untouched.
template <typename F>
void expect_accumulate_adds_scaled_gradients_and_skips_masked_rows() {
  const typename F::Case c = F::accumulate_case();
  const CaseJobs<F> cj = F::fused_jobs(c);
  for (const Job<F>& job : cj.jobs) {
    SCOPED_TRACE(F::job_label(job.options));
    const auto& p = *job.problem;
    const std::vector<bool> valid = F::valid_rows(c, p);
    const Tensor logits = whole_logits<F>(p, DType::F64);
    const auto inputs = whole_inputs<F>(c, p, DType::F64);
    const auto forward = F::forward(logits, inputs, job.options);
    Tensor buffer = Tensor::full(logits.shape(), 0.5, DType::F64);
    const Tensor two = Tensor::scalar(2.0, DType::F64);
    F::backward(logits, inputs, forward.saved, two, buffer, true);
    F::backward(logits, inputs, forward.saved, two, buffer, true);
    const Reference ref = F::reference_for(c, p, job.options, DType::F64, DType::F64);
    const auto got = buffer.to_doubles();
    for (int64_t i = 0; i < p.rows; ++i) {
      for (int64_t j = 0; j < p.vocab; ++j) {
        const size_t at = static_cast<size_t>(i * p.vocab + j);
        if (!valid[static_cast<size_t>(i)]) {
          ASSERT_EQ(got[at], 0.5) << "masked row " << i << " was written";
        } else {
          ASSERT_NEAR(got[at], 0.5 + 4 * ref.grad[at], 1e-12) << i << ", " << j;
        }
      }
    }
  }
}

// Two autograd backward passes add up on the leaf: twice the reference gradient (f64, within 1e-12).
template <typename F>
void expect_two_backward_passes_accumulate_on_the_leaf() {
  const typename F::Case c = F::fused_case();
  const CaseJobs<F> cj = F::fused_jobs(c);
  for (const Job<F>& job : cj.jobs) {
    SCOPED_TRACE(F::job_label(job.options));
    const auto& p = *job.problem;
    const auto inputs = whole_inputs<F>(c, p, DType::F64);
    Tensor logits = whole_logits<F>(p, DType::F64).set_requires_grad();
    F::loss(logits, inputs, job.options).backward();
    F::loss(logits, inputs, job.options).backward();
    const Reference ref = F::reference_for(c, p, job.options, DType::F64, DType::F64);
    std::vector<double> twice = ref.grad;
    for (double& g : twice) g *= 2;
    EXPECT_LE(grad_error(logits.grad().to_doubles(), twice, ref.grad_unit), 1e-12);
  }
}

// A batch whose every row is masked: loss exactly 0 and gradients exactly 0, for F's all-masked inputs on
// [3, vocab] logits of 1.5 in each of `dtypes` on `device`.
template <typename F>
void expect_all_masked_gives_exact_zeros(int64_t vocab, const std::vector<DType>& dtypes, Device device) {
  for (DType dtype : dtypes) {
    for (const auto& [options, inputs] : F::all_masked_runs(vocab, dtype, device)) {
      SCOPED_TRACE(dtype_str(dtype) + " " + F::job_label(options));
      Tensor logits = Tensor::full({3, vocab}, 1.5, dtype, device).set_requires_grad();
      Tensor loss = F::loss(logits, inputs, options);
      EXPECT_EQ(loss.item(), 0.0);
      loss.backward();
      for (double g : logits.grad().to_doubles()) ASSERT_EQ(g, 0.0);
    }
  }
}

// ---- where the group comes from ---------------------------------------------------------------------------------

// The group passed on the logits' sharding and in options.group: the same losses and LOCAL gradients at tp 2
// (f32), and the second ran its two collectives too.
template <typename F>
void expect_group_from_options_equals_group_from_sharding() {
  const typename F::Case c = F::group_case();
  const CaseJobs<F> cj = F::jobs_for(c, 2);
  const DType side = F::side_dtype(c, DType::F32);
  const auto from_sharding = run_tp<F>(c, cj.jobs, 2, DType::F32, side, Device::cpu());
  const auto from_options = run_tp<F>(c, cj.jobs, 2, DType::F32, side, Device::cpu(), {.group_in_options = true});
  ASSERT_EQ(from_sharding.size(), from_options.size());
  for (size_t j = 0; j < from_sharding.size(); ++j)
    for (size_t r = 0; r < from_sharding[j].size(); ++r) {
      EXPECT_EQ(from_sharding[j][r].loss, from_options[j][r].loss);
      EXPECT_EQ(from_sharding[j][r].grad, from_options[j][r].grad);
      EXPECT_EQ(from_options[j][r].forward_calls.size(), 2u);
    }
}

// A group of one rank (the logits sharded over it, the group also in the options or not) and logits replicated
// on both ranks of a group (no partition dim): the loss runs no collective and equals the dense f64 reference of
// the whole vocabulary.
template <typename F>
void expect_local_without_collectives() {
  const typename F::Case c = F::local_case();
  const typename F::Options o = F::local_options();
  const typename F::Problem p = F::problem_for(c, 1, o);
  const Reference ref = F::reference_for(c, p, o, DType::F64, DType::F64);
  struct Setup {
    int world;
    bool sharded, group_in_options;
  };
  for (const Setup s : {Setup{1, true, false}, Setup{1, true, true}, Setup{2, false, false}}) {
    SCOPED_TRACE("world " + std::to_string(s.world) + (s.sharded ? " sharded" : " replicated") +
                 (s.group_in_options ? ", group in the options" : ""));
    run_ranks(
        s.world,
        [&](std::shared_ptr<Communicator> gloo) {
          auto group = std::make_shared<RecordingCommunicator>(gloo);
          Tensor logits = whole_logits<F>(p, DType::F64);
          logits.set_sharding({s.sharded ? 1 : -1, 1, group});
          typename F::Options options = o;
          if (s.group_in_options) options.group = group;
          Tensor loss = F::loss(logits.set_requires_grad(), whole_inputs<F>(c, p, DType::F64), options);
          loss.backward();
          EXPECT_TRUE(group->calls().empty());
          EXPECT_LE(loss_error(loss.item(), ref.loss), 1e-12);
          EXPECT_LE(grad_error(logits.grad().to_doubles(), ref.grad, ref.grad_unit), 1e-11);
        },
        test_gloo_options());
  }
}

// One global problem (f64) split 1, 2 or 4 ways: every rank's loss within 1e-13 of the dense reference and its
// LOCAL gradient within 1e-12 of its slice of the dense gradient, and the loss of every split within 1e-12 of the
// unsplit one.
template <typename F>
void expect_the_loss_does_not_depend_on_the_split() {
  const typename F::Case c = F::split_case();
  for (const typename F::Options& o : F::split_options()) {
    SCOPED_TRACE(F::job_label(o));
    const typename F::Problem whole = F::problem_for(c, 1, o);
    const Reference ref = F::reference_for(c, whole, o, DType::F64, DType::F64);
    std::vector<double> seen;
    for (int tp : {1, 2, 4}) {
      typename F::Problem p = whole;
      p.vocab_local = whole.vocab / tp;
      const auto results = run_tp<F>(c, {Job<F>{o, &p}}, tp, DType::F64, DType::F64, Device::cpu());
      for (int r = 0; r < tp; ++r) {
        const RankResult& got = results[0][static_cast<size_t>(r)];
        EXPECT_LE(loss_error(got.loss, ref.loss), 1e-13) << "tp " << tp << " rank " << r;
        EXPECT_LE(grad_error(got.grad, column_slice(ref.grad, p, r), ref.grad_unit), 1e-12)
            << "tp " << tp << " rank " << r;
      }
      seen.push_back(results[0][0].loss);
    }
    EXPECT_NEAR(seen[1], seen[0], 1e-12 * std::abs(seen[0]));
    EXPECT_NEAR(seen[2], seen[0], 1e-12 * std::abs(seen[0]));
  }
}

// A vocabulary that does not divide by tp (2, 3 and 4): equal shards of ceil(V / tp) columns, the last one ending in
// NaN padding that is no id (ShardingSpec::full_extent = V). Every rank's loss equals the dense float64 one and its
// LOCAL gradient its slice of the dense gradient, with zero in the padding.
template <typename F>
void expect_a_padded_last_shard_to_equal_the_dense_loss() {
  typename F::Case c = F::split_case();
  while (c.vocab_local % 2 == 0 || c.vocab_local % 3 == 0) --c.vocab_local;  // V divides by none of 2, 3, 4
  for (const typename F::Options& o : F::split_options()) {
    SCOPED_TRACE(F::job_label(o));
    const typename F::Problem whole = F::problem_for(c, 1, o);
    const Reference ref = F::reference_for(c, whole, o, DType::F64, DType::F64);
    for (int tp : {2, 3, 4}) {
      typename F::Problem p = whole;
      p.vocab_local = (whole.vocab + tp - 1) / tp;
      ASSERT_LT(p.vocab_local * (tp - 1), p.vocab);
      const auto results = run_tp<F>(c, {Job<F>{o, &p}}, tp, DType::F64, DType::F64, Device::cpu());
      for (int r = 0; r < tp; ++r) {
        const RankResult& got = results[0][static_cast<size_t>(r)];
        EXPECT_LE(loss_error(got.loss, ref.loss), 1e-13) << "V " << p.vocab << " tp " << tp << " rank " << r;
        EXPECT_LE(grad_error(got.grad, column_slice(ref.grad, p, r, 0.0), ref.grad_unit), 1e-12)
            << "V " << p.vocab << " tp " << tp << " rank " << r;
      }
    }
  }
}

// Shards of unequal width (or of different vocabularies) are refused with the numbers, on every rank.
template <typename F>
void expect_unequal_shards_to_be_refused() {
  const typename F::Case c = F::split_case();
  const typename F::Options o = F::split_options().front();
  const typename F::Problem whole = F::problem_for(c, 1, o);
  run_ranks(
      2,
      [&](std::shared_ptr<Communicator> gloo) {
        // Each rank alone sees a consistent split (V = width x 2 holds every id); together they disagree.
        const int64_t width = whole.vocab / 2 + (gloo->rank() == 0 ? 0 : 2);
        typename F::Problem p = whole;
        p.vocab_local = width;
        Tensor logits = Tensor::zeros({whole.rows, width}, DType::F64);
        logits.set_sharding({1, 1, gloo});
        const auto inputs = F::inputs(c, p, gloo->rank(), logits.shape(), DType::F64, {Device::cpu(), true});
        try {
          F::loss(logits, inputs, o);
          ADD_FAILURE() << "rank " << gloo->rank() << ": unequal shards were accepted";
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("shards disagree"), std::string::npos) << e.what();
        }
      },
      test_gloo_options());
}

// A batch with no rows at tp 2: loss 0, no collective needed (every rank skips them together), an empty gradient.
template <typename F>
void expect_empty_batch_at_tp_two() {
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> gloo) {
        Tensor logits = Tensor::zeros({0, 5}, DType::F32).set_requires_grad();
        logits.set_sharding({1, 1, gloo});
        Tensor loss = F::loss(logits, F::empty_inputs(5), typename F::Options{});
        EXPECT_EQ(loss.item(), 0.0);
        loss.backward();
        EXPECT_EQ(logits.grad().numel(), 0);
      },
      test_gloo_options());
}

// ---- CUDA against the CPU ----------------------------------------------------------------------------------------

// The same problems through both backends at tp 2 (thread ranks), F's every reference case with -inf entries and
// logits x1000 included, f32 and bf16: the GPU's loss and LOCAL gradient within F's GPU tolerance of the CPU's
// (twice the gradient bound for bf16, where both sides round the gradient once).
template <typename F>
void expect_cuda_matches_cpu_at_tp2(Device gpu) {
  for (const typename F::Case& c : F::reference_cases()) {
    SCOPED_TRACE(c.name);
    const CaseJobs<F> cj = F::jobs_for(c, 2);
    for (DType dtype : {DType::F32, DType::BF16}) {
      const DType side = F::side_dtype(c, dtype);
      const auto cpu = run_tp<F>(c, cj.jobs, 2, dtype, side, Device::cpu());
      const auto on_gpu = run_tp<F>(c, cj.jobs, 2, dtype, side, gpu);
      const Tolerance tol = F::tolerance_for(dtype, c, gpu);
      for (size_t k = 0; k < cj.jobs.size(); ++k) {
        const Job<F>& job = cj.jobs[k];
        SCOPED_TRACE(F::job_label(job.options));
        const Reference ref = F::reference_for(c, *job.problem, job.options, dtype, side);
        for (int r = 0; r < 2; ++r) {
          const double le = loss_error(on_gpu[k][r].loss, cpu[k][r].loss);
          const double ge = grad_error(on_gpu[k][r].grad, cpu[k][r].grad, ref.grad_unit);
          EXPECT_LE(le, tol.loss) << "rank " << r;
          EXPECT_LE(ge, dtype == DType::BF16 ? 2 * tol.grad : tol.grad) << "rank " << r;
          F::Log::get().note(log_label<F>("cuda vs cpu tp 2", job.options, dtype, side, c), le, ge);
        }
      }
    }
  }
}

// One run of a family's misaligned-view check: the case (its rows and vocabulary), the options, the logits'
// dtype, the side input's dtype and row offset, and what the error log calls it.
template <typename F>
struct MisalignedRun {
  typename F::Case c;
  typename F::Options options;
  DType dtype;
  DType side;
  int64_t side_row_offset = 0;
  std::string label;
};

// The logits as rows [1, rows + 1) of a [rows + 1, V] tensor: with an odd V the data does not start on a 16-byte
// boundary, so the kernels take their scalar head and tail paths (a vocabulary of 32771 takes the looped,
// multi-pack path). Loss and gradient on the GPU against the CPU path on the same values: loss within 4e-6, the
// gradient within 1e-5 (f32) or 8e-3 (bf16: both sides round the gradient once), measured on F's gradient unit.
template <typename F>
void expect_cuda_matches_cpu_on_misaligned_views(Device gpu) {
  for (const MisalignedRun<F>& run : F::misaligned_runs()) {
    SCOPED_TRACE(run.label + " " + dtypes_str(run.dtype, run.side) + " " + F::job_label(run.options) +
                 (run.side_row_offset > 1 ? " side offset " + std::to_string(run.side_row_offset) : ""));
    const auto& c = run.c;
    const typename F::Problem p = F::problem_for(c, 1, run.options);
    Tensor cpu = padded_rows(F::logits(p), p.rows, p.vocab, 1, run.dtype, Device::cpu()).set_requires_grad();
    Tensor on_gpu = padded_rows(F::logits(p), p.rows, p.vocab, 1, run.dtype, gpu);
    on_gpu.set_requires_grad();
    const Shape shape{p.rows, p.vocab};
    Tensor cpu_loss =
        F::loss(cpu, F::inputs(c, p, 0, shape, run.side, {Device::cpu(), true, run.side_row_offset}), run.options);
    Tensor gpu_loss =
        F::loss(on_gpu, F::inputs(c, p, 0, shape, run.side, {gpu, true, run.side_row_offset}), run.options);
    const double le = loss_error(gpu_loss.item(), cpu_loss.item());
    EXPECT_LE(le, 4e-6);
    cpu_loss.backward();
    gpu_loss.backward();
    const Reference ref = F::reference_for(c, p, run.options, run.dtype, run.side);
    const double ge = grad_error(on_gpu.grad().to_doubles(), cpu.grad().to_doubles(), ref.grad_unit);
    EXPECT_LE(ge, run.dtype == DType::BF16 ? 8e-3 : 1e-5);
    const std::string tag = F::job_tag(run.options);
    F::Log::get().note(std::string(F::kLogPrefix) + "cuda vs cpu " + run.label + (tag.empty() ? "" : " " + tag) + " " +
                           dtype_str(run.dtype),
                       le, ge);
  }
}

// The targets, labels and cache on the GPU or on the host (tp 2, f32): bit-identical losses and gradients.
template <typename F>
void expect_host_and_device_inputs_give_the_same_result(Device gpu) {
  const typename F::Case c = F::host_device_case();
  const CaseJobs<F> cj = F::jobs_for(c, 2);
  const DType side = F::side_dtype(c, DType::F32);
  const auto on_device = run_tp<F>(c, cj.jobs, 2, DType::F32, side, gpu);
  const auto on_host = run_tp<F>(c, cj.jobs, 2, DType::F32, side, gpu, {.inputs_on_device = false});
  for (size_t k = 0; k < cj.jobs.size(); ++k)
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(on_device[k][r].loss, on_host[k][r].loss);
      EXPECT_EQ(on_device[k][r].grad, on_host[k][r].grad);
    }
}

// A [rows, vocab] gradient buffer that held 0.5 everywhere and then took two accumulating backward passes with
// grad_output 2: the rows that are not valid still hold 0.5 (a failure and +inf otherwise); returns the worst
// |got - 0.5 - 4 g| / (4 scale) over the valid rows, scale = max(unit, max |g|) for the reference gradient g.
inline double accumulated_error(const std::vector<double>& got, const std::vector<double>& ref_grad, double unit,
                                const std::vector<bool>& valid, int64_t rows, int64_t vocab) {
  double worst = 0, scale = unit;
  for (double g : ref_grad) scale = std::max(scale, std::abs(g));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < vocab; ++j) {
      const size_t at = static_cast<size_t>(i * vocab + j);
      if (valid[static_cast<size_t>(i)]) {
        worst = std::max(worst, std::abs(got[at] - 0.5 - 4 * ref_grad[at]) / (4 * scale));
      } else if (got[at] != 0.5) {
        ADD_FAILURE() << "masked row " << i << " was written: " << got[at] << " at column " << j;
        return kInf;
      }
    }
  }
  return worst;
}

// bf16 logits on the GPU, two accumulating backward passes with grad_output 2 into an f32 buffer that held 0.5:
// within 1e-5 of 0.5 + 4 g for the float64 reference g of the stored values, the masked rows untouched.
template <typename F>
void expect_cuda_accumulates_into_an_f32_buffer_for_bf16_logits(Device gpu) {
  const typename F::Case c = F::gpu_accumulate_case();
  const CaseJobs<F> cj = F::fused_jobs(c);
  const DType side = F::side_dtype(c, DType::BF16);
  for (const Job<F>& job : cj.jobs) {
    SCOPED_TRACE(F::job_label(job.options));
    const auto& p = *job.problem;
    const Tensor logits = whole_logits<F>(p, DType::BF16, gpu);
    const auto inputs = whole_inputs<F>(c, p, side, gpu);
    const auto forward = F::forward(logits, inputs, job.options);
    Tensor buffer = Tensor::full(logits.shape(), 0.5, DType::F32, gpu);
    const Tensor two = Tensor::scalar(2.0, DType::F32, gpu);
    F::backward(logits, inputs, forward.saved, two, buffer, true);
    F::backward(logits, inputs, forward.saved, two, buffer, true);
    const Reference ref = F::reference_for(c, p, job.options, DType::BF16, side);
    const double worst =
        accumulated_error(buffer.to_doubles(), ref.grad, ref.grad_unit, F::valid_rows(c, p), p.rows, p.vocab);
    EXPECT_LE(worst, 1e-5);
    const std::string tag = F::job_tag(job.options);
    F::Log::get().note(std::string(F::kLogPrefix) + "cuda bf16 logits, f32 grad" + (tag.empty() ? "" : " " + tag), 0,
                       worst);
  }
}

// ---- bad inputs --------------------------------------------------------------------------------------------------

// Logits sharded on the rows (dim 0) at tp 2 are named as such: not on the vocabulary.
template <typename F>
void expect_logits_sharded_on_another_dim_are_named() {
  run_ranks(
      2,
      [&](std::shared_ptr<Communicator> gloo) {
        Tensor logits = Tensor::zeros({4, 10}, DType::F32);
        logits.set_sharding({0, 1, gloo});
        const std::string m =
            retort::testing::message_of([&] { F::loss(logits, F::valid_inputs_4x10(), typename F::Options{}); });
        EXPECT_NE(m.find("sharded on dim 0"), std::string::npos) << m;
        EXPECT_NE(m.find("not on the vocabulary"), std::string::npos) << m;
      },
      test_gloo_options());
}

}  // namespace retort::loss_testing
