// `retort bench loss`: forward + backward of a loss over bf16 logits [tokens, vocab], timed per step.
//
// One device (--tp 1): retort's fused losses, losses::cross_entropy and losses::distribution_loss with the forward or
// reverse KL, as autograd ops (variant "fused": forward, then the backward reads the logits again) and through the
// loss-and-gradient API (variant "one_read": cross_entropy_with_grad / distribution_loss_with_grad, which on a
// Hopper GPU read the logits once, the row resident in a cluster's shared memory). bench/loss_bench_torch.py
// measures the same losses in PyTorch eager and torch.compile, with the same JSON fields.
//
// Vocab-parallel (--tp N, one process per GPU under `retort launch --nproc N`; `retort bench loss --tp N` starts
// them itself), each rank holding [tokens, vocab / N] of the same global logits:
//   fused_tp   retort's vocab-parallel kernels (the same ops, given the tp group)
//   manual_tp  the same O(tokens) communication composed from core/kernels and the Communicator, as a user without
//              the fused losses would write it: per-row log-sum-exp of the shard, all-gather of those [tokens, N],
//              their log-sum-exp and softmax (the global lse and this shard's weight exp(lse_r - lse)), the target
//              logit by a gather and a SUM all-reduce (for KL a row dot product E_p[t - x] by a batched GEMM and a
//              SUM all-reduce); backward through a materialised softmax, a row scaling (batched GEMM) and a scatter
//              of the one-hot term. core has no row-max or exp kernel, so the shard's log-sum-exp is
//              kernels::cross_entropy_forward with every row ignored.
//   gather     all-gather the full logits along the vocabulary, then the dense loss; the gradient is this rank's
//              columns of the dense gradient
// Latency is the maximum over ranks; an out-of-memory error in a variant (or its inputs) is reported as "OOM"
// and the benchmark goes on (ranks are symmetric, so all of them fail at the same allocation).
//
// Measurements, per (loss, vocab, variant):
//   time       median of --iters steps after --warmup, each bracketed by CUDA events on the compute stream (the
//              host clock on the CPU); a step is the loss op and its backward (the closure that loss.backward()
//              runs for a logits tensor that is not a leaf), gradient allocated inside the step
//   bandwidth  bytes that must move / time, where bytes = the logits read twice + the gradient written once (for
//              KL the teacher read twice too), as a share of the device-to-device copy bandwidth measured at
//              start (cudaMemcpyAsync, read + write bytes / time)
//   memory     one more step after the timed ones: the stream-ordered pool's high-water mark
//              (cudaMemPoolAttrUsedMemHigh, reset before the step) minus what was in use before it (the inputs),
//              so the gradient counts; not measured on the CPU
//   checks     the loss value, the gradient's global norm, and (tp > 1) the largest |difference| between each
//              variant's local gradient and the first variant's
#include "apps/bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "parallel/launch/launcher.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/kernels/kernels.h"
#include "core/tensor/device_runtime.h"
#include "core/tensor/random.h"
#include "core/util/error.h"
#include "losses/cross_entropy.h"
#include "losses/distribution_loss.h"
#include "parallel/comm/rendezvous.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cuda_context.h"
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::apps {

namespace {

enum class LossKind { CrossEntropy, ForwardKL, ReverseKL };

LossKind parse_loss(const std::string& name) {
  if (name == "ce") return LossKind::CrossEntropy;
  if (name == "fkl") return LossKind::ForwardKL;
  if (name == "rkl") return LossKind::ReverseKL;
  throw InputError(fmt::format("--losses: unknown loss '{}' (ce, fkl, rkl)", name));
}

bool is_kl(LossKind kind) {
  return kind != LossKind::CrossEntropy;
}

std::string join(const std::vector<std::string>& items, const char* sep = ",") {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

template <typename T>
std::string join_numbers(const std::vector<T>& items) {
  std::vector<std::string> text;
  for (const T& item : items) text.push_back(fmt::format("{}", item));
  return join(text);
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// An allocation that failed, from retort's allocator, a CUDA call or cuBLAS.
bool is_out_of_memory(const std::exception& e) {
  const std::string_view text = e.what();
  return text.find("out of GPU memory") != std::string_view::npos ||
         text.find("out of memory") != std::string_view::npos || text.find("ALLOC_FAILED") != std::string_view::npos;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// ---- the run: device, ranks and groups -------------------------------------------------------------------

struct Run {
  Device device = Device::cpu();
  std::string device_name = "cpu";
  int rank = 0;
  int tp = 1;
  int64_t tokens = 0;
  std::shared_ptr<GlooCommunicator> world;  // host-side agreement between ranks; null for tp 1
  std::shared_ptr<Communicator> comm;       // the tp group: NCCL on GPUs, the Gloo world on CPUs; null for tp 1

  // Elementwise MAX (or SUM) of `values` over the ranks.
  std::vector<double> across_ranks(const std::vector<double>& values, ReduceOp op) const {
    if (!world) return values;
    Tensor t = Tensor::from_doubles(values, {static_cast<int64_t>(values.size())});
    world->all_reduce(t, op);
    return t.to_doubles();
  }
  bool any_rank(bool flag) const { return across_ranks({flag ? 1.0 : 0.0}, ReduceOp::Max)[0] != 0; }
};

// Times one call: CUDA events on the compute stream around it (the call's host gaps included), or the host clock.
class StepTimer {
 public:
  explicit StepTimer(Device device) : device_(device) {
#ifdef RETORT_WITH_CUDA
    if (device_.is_cuda()) {
      cuda::DeviceGuard guard(device_);
      RETORT_CUDA_CHECK(cudaEventCreate(&start_));
      RETORT_CUDA_CHECK(cudaEventCreate(&stop_));
    }
#endif
  }
  ~StepTimer() {
#ifdef RETORT_WITH_CUDA
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
#endif
  }
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  double ms(const std::function<void()>& fn) {
    if (device_.is_cpu()) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
#ifdef RETORT_WITH_CUDA
    cuda::DeviceGuard guard(device_);
    cudaStream_t stream = cuda::compute_stream(device_.index);
    RETORT_CUDA_CHECK(cudaEventRecord(start_, stream));
    fn();
    RETORT_CUDA_CHECK(cudaEventRecord(stop_, stream));
    RETORT_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    RETORT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
#else
    return 0;
#endif
  }

 private:
  Device device_;
#ifdef RETORT_WITH_CUDA
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
#endif
};

// Peak memory of one step from the stream-ordered pool every retort GPU tensor comes from. Not on the CPU.
class PoolMeter {
 public:
  explicit PoolMeter(Device device) : device_(device) {}
  bool available() const { return device_.is_cuda(); }

  void start() {
#ifdef RETORT_WITH_CUDA
    if (!available()) return;
    device_runtime::synchronize(device_);
    cudaMemPool_t pool = current_pool();
    std::uint64_t used = 0, zero = 0;  // the attributes are cuuint64_t (64-bit)
    RETORT_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    RETORT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));  // resets to current
    base_ = used;
#endif
  }
  // Bytes above the level at start() at the peak since, or -1 when not measured.
  double extra() {
#ifdef RETORT_WITH_CUDA
    if (!available()) return -1;
    device_runtime::synchronize(device_);
    std::uint64_t high = 0;
    RETORT_CUDA_CHECK(cudaMemPoolGetAttribute(current_pool(), cudaMemPoolAttrUsedMemHigh, &high));
    return static_cast<double>(high) - static_cast<double>(base_);
#else
    return -1;
#endif
  }

 private:
#ifdef RETORT_WITH_CUDA
  cudaMemPool_t current_pool() const {
    cudaMemPool_t pool = nullptr;
    RETORT_CUDA_CHECK(cudaDeviceGetMemPool(&pool, device_.index));
    return pool;
  }
  uint64_t base_ = 0;
#endif
  Device device_;
};

// Device-to-device copy bandwidth in GB/s, counting the bytes read and written (as the loss bytes do).
double copy_bandwidth(const Run& run, int64_t bytes, StepTimer& timer) {
  Tensor src = Tensor::zeros({bytes / 4}, DType::F32, run.device);
  Tensor dst = Tensor::empty({bytes / 4}, DType::F32, run.device);
  auto copy = [&] { device_runtime::copy(dst.raw_data(), run.device, src.raw_data(), run.device, src.nbytes()); };
  for (int i = 0; i < 3; ++i) copy();
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) ms.push_back(timer.ms(copy));
  const double worst = run.across_ranks({median(ms)}, ReduceOp::Max)[0];
  return 2.0 * static_cast<double>(src.nbytes()) / (worst / 1e3) / 1e9;
}

// ---- inputs ----------------------------------------------------------------------------------------------------

struct Inputs {
  int64_t vocab = 0;
  int64_t vocab_local = 0;
  Tensor student;  // bf16 [tokens, vocab_local], requires a gradient
  Tensor teacher;  // bf16 [tokens, vocab_local] (KL only)
  Tensor targets;  // i32 [tokens], global ids, on the device
  std::vector<int32_t> host_targets;
};

// This rank's columns of logits ~ N(0, std^2) [tokens, vocab], the same for any tp: A [tokens, 64] x B [64, vocab]
// on the device (B drawn as B^T so that a rank's columns are rows of it), cheap to draw at any size.
Tensor draw_logits(const Run& run, int64_t vocab, int64_t vocab_local, double std, uint64_t seed,
                   const std::string& name) {
  constexpr int64_t k = 64;
  const Tensor a = randn({run.tokens, k}, 1.0, seed, stream_id(name + ".a"), DType::BF16, run.device);
  const Tensor bt =
      randn({vocab, k}, std / std::sqrt(static_cast<double>(k)), seed, stream_id(name + ".b"), DType::BF16, run.device);
  Tensor out = Tensor::empty({run.tokens, vocab_local}, DType::BF16, run.device);
  kernels::gemm(a, bt.rows(run.rank * vocab_local, vocab_local), out, false, true, 1.f, 0.f);
  return out;
}

Inputs make_inputs(const Run& run, const LossBenchOptions& o, LossKind kind, int64_t vocab) {
  Inputs in;
  in.vocab = vocab;
  in.vocab_local = vocab / run.tp;
  in.student = draw_logits(run, vocab, in.vocab_local, o.logit_std, o.seed, "student");
  in.student.set_requires_grad(true);
  if (is_kl(kind)) in.teacher = draw_logits(run, vocab, in.vocab_local, o.logit_std, o.seed, "teacher");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  in.host_targets.resize(static_cast<size_t>(run.tokens));
  for (auto& t : in.host_targets) t = id(rng);
  in.targets = Tensor::from_ints(in.host_targets, {run.tokens}, run.device);
  device_runtime::synchronize(run.device);
  return in;
}

// ---- the variants ---------------------------------------------------------------------------------------------

struct StepOut {
  Tensor loss;  // [] f32, detached
  Tensor grad;  // the local gradient wrt the student logits
};
using Step = std::function<StepOut()>;

// The gradient an op's autograd node gives its first input for d loss = `one`: what loss.backward() computes for
// logits that are not a leaf (a leaf would add the engine's copy into .grad, which a model's logits never pay).
Tensor first_input_grad(const Tensor& loss, const Tensor& one) {
  RETORT_CHECK(loss.grad_fn() != nullptr, "the loss recorded no autograd node");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = loss.grad_fn()->backward(one);
  RETORT_CHECK(!grads.empty() && grads[0].defined(), "the loss node gave no gradient for its logits");
  return grads[0];
}

// The loss op on (student, teacher | targets); group null: dense (or single-device) loss.
Tensor loss_op(LossKind kind, const Tensor& student, const Tensor& teacher, const Tensor& targets,
               const std::shared_ptr<Communicator>& group) {
  if (kind == LossKind::CrossEntropy) {
    losses::CrossEntropyOptions options;
    options.group = group;
    return losses::cross_entropy(student, targets, options);
  }
  losses::DistributionLossOptions options;
  options.divergence = kind == LossKind::ForwardKL ? losses::Divergence::ForwardKL : losses::Divergence::ReverseKL;
  options.group = group;
  return losses::distribution_loss(student, teacher, Tensor(), options);
}

Step fused_step(const Run& run, const Inputs& in, LossKind kind, const Tensor& one) {
  return [&run, &in, kind, one] {
    Tensor loss = loss_op(kind, in.student, in.teacher, in.targets, run.comm);
    Tensor grad = first_input_grad(loss, one);
    return StepOut{loss.detach(), grad};
  };
}

// Loss and gradient in one call into a gradient buffer allocated in the step (the *_with_grad API): on one
// Hopper GPU the one-read kernels, the row resident in a cluster's shared memory.
Step one_read_step(const Run& run, const Inputs& in, LossKind kind) {
  return [&run, &in, kind] {
    Tensor grad = Tensor::empty(in.student.shape(), in.student.dtype(), run.device);
    if (kind == LossKind::CrossEntropy)
      return StepOut{losses::cross_entropy_with_grad(in.student, in.targets, grad), grad};
    losses::DistributionLossOptions options;
    options.divergence = kind == LossKind::ForwardKL ? losses::Divergence::ForwardKL : losses::Divergence::ReverseKL;
    return StepOut{losses::distribution_loss_with_grad(in.student, in.teacher, Tensor(), grad, options), grad};
  };
}

Step gather_step(const Run& run, const Inputs& in, LossKind kind, const Tensor& one) {
  return [&run, &in, kind, one] {
    Tensor full = run.comm->all_gather(in.student, 1);  // [tokens, vocab]
    full.set_requires_grad(true);
    const Tensor full_teacher = is_kl(kind) ? run.comm->all_gather(in.teacher, 1) : Tensor();
    Tensor loss = loss_op(kind, full, full_teacher, in.targets, nullptr);
    const Tensor full_grad = first_input_grad(loss, one);
    Tensor grad = Tensor::empty(in.student.shape(), in.student.dtype(), run.device);
    const size_t elem = dtype_size(grad.dtype());
    device_runtime::copy_2d(grad.raw_data(), in.vocab_local * elem,
                            static_cast<const char*>(full_grad.raw_data()) + run.rank * in.vocab_local * elem,
                            in.vocab * elem, in.vocab_local * elem, static_cast<size_t>(run.tokens), run.device);
    return StepOut{loss.detach(), grad};
  };
}

// The building blocks of manual_tp, each one core kernel or collective.
class ManualParts {
 public:
  ManualParts(const Run& run, const Inputs& in) : run_(run), n_(run.tokens), vl_(in.vocab_local) {
    RETORT_INPUT_CHECK(n_ * vl_ + 1 <= INT32_MAX,
                       "manual_tp: {} tokens x {} local columns do not fit the i32 flat index its one-hot gather and "
                       "scatter use",
                       n_, vl_);
    std::vector<int32_t> flat(static_cast<size_t>(n_)), ignore(static_cast<size_t>(n_), kIgnore);
    for (int64_t r = 0; r < n_; ++r) {
      const int64_t local = in.host_targets[r] - run.rank * vl_;
      flat[r] = static_cast<int32_t>(local >= 0 && local < vl_ ? r * vl_ + local : n_ * vl_);  // past the end: not ours
    }
    flat_targets_ = Tensor::from_ints(flat, {n_}, run.device);
    ignore_ = Tensor::from_ints(ignore, {n_}, run.device);
    minus_inv_n_ = Tensor::full({n_, 1}, -1.0 / static_cast<double>(n_), in.student.dtype(), run.device);
  }

  int64_t rows() const { return n_; }
  int64_t cols() const { return vl_; }
  float inv_n() const { return 1.f / static_cast<float>(n_); }

  Tensor empty(const Shape& shape, DType dtype) const { return Tensor::empty(shape, dtype, run_.device); }

  // Log-sum-exp of every row of x [N, C]: the single-device cross-entropy kernel with every row ignored.
  Tensor row_lse(const Tensor& x) const {
    Tensor lse = empty({n_}, DType::F32), unused = empty({n_}, DType::F32);
    kernels::cross_entropy_forward(x, ignore_, kIgnore, unused, lse);
    return lse;
  }

  // The global log-sum-exp from each shard's, and this shard's weight exp(lse_r - lse) [N]: an all-gather of
  // [N, 1] into [N, tp], then its row log-sum-exp and row softmax.
  struct Global {
    Tensor lse;
    Tensor weight;
  };
  Global global(const Tensor& local_lse) const {
    const int tp = run_.comm->size();
    const Tensor all = run_.comm->all_gather(local_lse.view({n_, 1}), 1);
    Global g{row_lse(all), empty({n_}, DType::F32)};
    Tensor softmax = empty({n_, tp}, DType::F32);
    kernels::softmax_forward(all, softmax);
    device_runtime::copy_2d(g.weight.raw_data(), sizeof(float),
                            static_cast<const char*>(softmax.raw_data()) + run_.rank * sizeof(float),
                            tp * sizeof(float), sizeof(float), static_cast<size_t>(n_), run_.device);
    return g;
  }

  // x[n, target_n] for the rows whose target this shard owns, 0 for the others (f32 [N]): a gather through the
  // flattened logits, as the embedding lookup of a vocab shard.
  Tensor owned_target_logit(const Tensor& x) const {
    Tensor picked = empty({n_, 1}, x.dtype()), out = empty({n_}, DType::F32);
    kernels::embedding_forward(x.view({n_ * vl_, 1}), flat_targets_, 0, n_ * vl_ + 1, picked);
    kernels::cast(picked, out);
    return out;
  }

  // grad[n, target_n] -= 1 / N on the rows this shard owns: the scatter matching owned_target_logit.
  void subtract_one_hot(Tensor& grad) const {
    Tensor flat = grad.view({n_ * vl_, 1});
    kernels::embedding_backward(minus_inv_n_, flat_targets_, 0, n_ * vl_ + 1, flat);
  }

  // out[n, :] = alpha * scale[n] * x[n, :] + beta * out[n, :]: a batched GEMM of [1, 1] x [1, C] per row.
  void scale_rows(const Tensor& scale, const Tensor& x, float alpha, float beta, Tensor& out) const {
    Tensor s = empty({n_, 1, 1}, x.dtype());
    kernels::cast(scale, s);
    Tensor out3 = out.view({n_, 1, vl_});
    kernels::gemm(s, x.view({n_, 1, vl_}), out3, false, false, alpha, beta);
  }

  // sum_j a[n, j] b[n, j] (f32 [N]): a batched GEMM of [1, C] x [C, 1] per row.
  Tensor row_dot(const Tensor& a, const Tensor& b) const {
    Tensor out = empty({n_, 1, 1}, DType::F32);
    kernels::gemm(a.view({n_, 1, vl_}), b.view({n_, 1, vl_}), out, false, true, 1.f, 0.f);
    return out.view({n_});
  }

  Tensor mean(const Tensor& rows) const {
    Tensor out = empty({}, DType::F32);
    kernels::sum(rows, out);
    kernels::scale(out, inv_n(), out);
    return out;
  }

 private:
  static constexpr int kIgnore = -100;
  const Run& run_;
  int64_t n_, vl_;
  Tensor flat_targets_;  // i32 [N]: r * Vl + local target, or N * Vl where another shard owns it
  Tensor ignore_;        // i32 [N] of kIgnore
  Tensor minus_inv_n_;   // [N, 1] of -1/N in the logits' dtype
};

Step manual_step(const Run& run, const Inputs& in, LossKind kind) {
  auto parts = std::make_shared<const ManualParts>(run, in);
  if (kind == LossKind::CrossEntropy) {
    return [&run, &in, parts] {
      const ManualParts& m = *parts;
      const Tensor& x = in.student;
      const auto g = m.global(m.row_lse(x));
      Tensor target = m.owned_target_logit(x);
      run.comm->all_reduce(target, ReduceOp::Sum);
      Tensor row = m.empty({m.rows()}, DType::F32);
      kernels::add(g.lse, target, row, 1.f, -1.f);  // lse - x_y
      const Tensor loss = m.mean(row);
      // Backward: (softmax_r(x) * exp(lse_r - lse) - onehot) / N.
      Tensor p = m.empty(x.shape(), x.dtype());
      kernels::softmax_forward(x, p);
      Tensor grad = m.empty(x.shape(), x.dtype());
      m.scale_rows(g.weight, p, m.inv_n(), 0.f, grad);
      m.subtract_one_hot(grad);
      return StepOut{loss, grad};
    };
  }
  const bool forward_kl = kind == LossKind::ForwardKL;
  return [&run, &in, parts, forward_kl] {
    const ManualParts& m = *parts;
    const Tensor &x = in.student, &t = in.teacher;
    const auto gx = m.global(m.row_lse(x));
    const auto gt = m.global(m.row_lse(t));
    // forward KL(p || q) = E_p[t - x] - lse_t + lse_x; reverse KL(q || p) = E_q[x - t] - lse_x + lse_t, with the
    // expectation over this shard's softmax s (of t, or of x) times the shard's weight, summed over the ranks.
    Tensor d = m.empty(x.shape(), x.dtype());
    kernels::add(forward_kl ? t : x, forward_kl ? x : t, d, 1.f, -1.f);
    Tensor s = m.empty(x.shape(), x.dtype());
    kernels::softmax_forward(forward_kl ? t : x, s);
    const auto& weighted = forward_kl ? gt : gx;
    Tensor expectation = m.empty({m.rows()}, DType::F32);
    kernels::mul(m.row_dot(s, d), weighted.weight, expectation);
    run.comm->all_reduce(expectation, ReduceOp::Sum);
    Tensor row = m.empty({m.rows()}, DType::F32);
    kernels::add(expectation, forward_kl ? gx.lse : gt.lse, row, 1.f, 1.f);
    kernels::add(row, forward_kl ? gt.lse : gx.lse, row, 1.f, -1.f);
    const Tensor loss = m.mean(row);
    Tensor grad = m.empty(x.shape(), x.dtype());
    if (forward_kl) {  // (q - p) / N
      Tensor q = m.empty(x.shape(), x.dtype());
      kernels::softmax_forward(x, q);
      m.scale_rows(gx.weight, q, m.inv_n(), 0.f, grad);
      m.scale_rows(gt.weight, s, -m.inv_n(), 1.f, grad);
    } else {  // q (x - t - E_q[x - t]) / N
      Tensor qd = m.empty(x.shape(), x.dtype());
      kernels::mul(s, d, qd);
      m.scale_rows(gx.weight, qd, m.inv_n(), 0.f, grad);
      Tensor centre = m.empty({m.rows()}, DType::F32);
      kernels::mul(gx.weight, expectation, centre);
      m.scale_rows(centre, s, -m.inv_n(), 1.f, grad);
    }
    return StepOut{loss, grad};
  };
}

// ---- measuring -------------------------------------------------------------------------------------------------

struct Result {
  std::string loss, variant;
  int64_t vocab = 0;
  bool oom = false;
  std::string error;
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  double bytes = 0;         // per rank: what must move
  double logits_bytes = 0;  // per rank: one logits-sized buffer
  double extra_bytes = -1;  // per rank, the largest; -1: not measured
  double loss_value = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double grad_max_diff = -1;  // vs the first variant; -1: none
};

// A gradient on the host, for the comparison between variants.
struct HostGrad {
  Tensor host;
  float at(int64_t i) const {
    if (host.dtype() == DType::F32) return host.data<float>()[i];
    uint32_t bits = static_cast<uint32_t>(host.data<uint16_t>()[i]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
};

HostGrad to_host(const Tensor& grad) {
  Tensor g = grad.dtype() == DType::BF16 || grad.dtype() == DType::F32 ? grad : grad.to(DType::F32);
  return HostGrad{g.to(Device::cpu())};
}

double max_abs_diff(const HostGrad& a, const HostGrad& b) {
  RETORT_CHECK(a.host.numel() == b.host.numel(), "gradients of {} and {} elements", a.host.numel(), b.host.numel());
  double worst = 0;
  for (int64_t i = 0; i < a.host.numel(); ++i) {
    const double d = std::abs(static_cast<double>(a.at(i)) - static_cast<double>(b.at(i)));
    if (!(d <= worst)) worst = d;  // NaN wins
  }
  return worst;
}

class Bench {
 public:
  Bench(const LossBenchOptions& o, Run& run) : o_(o), run_(run), timer_(run.device), meter_(run.device) {
    one_ = Tensor::full({}, 1.0, DType::F32, run.device);
  }

  double copy_gbps(int64_t bytes) { return copy_bandwidth(run_, bytes, timer_); }

  // Every variant of one (loss, vocab).
  std::vector<Result> run_group(LossKind kind, const std::string& loss_name, int64_t vocab,
                                const std::vector<std::string>& variants) {
    const int64_t vocab_local = vocab / run_.tp;
    const double logits_bytes = static_cast<double>(run_.tokens * vocab_local * 2);  // bf16
    auto blank = [&](const std::string& variant) {
      Result r;
      r.loss = loss_name;
      r.variant = variant;
      r.vocab = vocab;
      r.logits_bytes = logits_bytes;
      r.bytes = logits_bytes * (is_kl(kind) ? 5 : 3);  // 2 reads (+ 2 teacher reads) + 1 gradient write
      return r;
    };
    std::vector<Result> out;
    std::optional<Inputs> inputs;
    std::string input_error;
    try {
      inputs = make_inputs(run_, o_, kind, vocab);
    } catch (const Error& e) {
      if (!is_out_of_memory(e)) throw;
      input_error = fmt::format("inputs: {}", e.what());
    }
    if (run_.any_rank(!inputs.has_value())) {
      inputs.reset();
      for (const auto& variant : variants) {
        Result r = blank(variant);
        r.oom = true;
        r.error = input_error.empty() ? "inputs: out of memory on another rank" : input_error;
        out.push_back(r);
        emit_(r);
      }
      return out;
    }
    std::optional<HostGrad> reference;
    for (const auto& variant : variants) {
      Result r = blank(variant);
      measure(kind, variant, *inputs, r, reference);
      out.push_back(r);
      emit_(r);
    }
    return out;
  }

  std::function<void(const Result&)> emit_;

 private:
  Step make_step(LossKind kind, const std::string& variant, const Inputs& in) {
    if (variant == "fused" || variant == "fused_tp") return fused_step(run_, in, kind, one_);
    if (variant == "one_read") return one_read_step(run_, in, kind);
    if (variant == "gather") return gather_step(run_, in, kind, one_);
    if (variant == "manual_tp") return manual_step(run_, in, kind);
    throw InputError(fmt::format("unknown variant '{}'", variant));
  }

  void measure(LossKind kind, const std::string& variant, const Inputs& in, Result& r,
               std::optional<HostGrad>& reference) {
    std::vector<double> times;
    double extra = -1, sum_squares = 0, diff = -1;
    std::string error;
    try {
      if (contains(o_.simulate_oom, variant))
        throw Error(fmt::format("out of GPU memory (simulated by --simulate-oom {})", variant));
      const Step step = make_step(kind, variant, in);
      for (int i = 0; i < o_.warmup; ++i) step();
      for (int i = 0; i < o_.iters; ++i) {
        if (run_.comm) run_.comm->barrier();  // no rank's clock starts while it waits for a late peer
        times.push_back(timer_.ms([&] { step(); }));
      }
      // One more step for the memory peak, the loss and the gradient.
      meter_.start();
      const StepOut result = step();
      extra = meter_.extra();
      r.loss_value = result.loss.item();
      Tensor squares = Tensor::empty({1}, DType::F32, run_.device);
      kernels::sum_squares(result.grad, squares);
      sum_squares = squares.item();
      if (o_.check_grads && run_.tp > 1) {
        HostGrad mine = to_host(result.grad);
        if (reference) {
          diff = max_abs_diff(*reference, mine);
        } else {
          reference = std::move(mine);
        }
      }
    } catch (const Error& e) {
      if (!is_out_of_memory(e)) throw;
      error = e.what();
      times.clear();
      device_runtime::synchronize(run_.device);
    }
    const bool oom = run_.any_rank(!error.empty());
    if (oom) {
      r.oom = true;
      r.error = error.empty() ? "out of memory on another rank" : error;
      return;
    }
    double mean = 0;
    for (double t : times) mean += t / static_cast<double>(times.size());
    const auto worst = run_.across_ranks(
        {median(times), *std::min_element(times.begin(), times.end()), mean, extra, diff}, ReduceOp::Max);
    r.median_ms = worst[0];
    r.min_ms = worst[1];
    r.mean_ms = worst[2];
    r.extra_bytes = worst[3];
    r.grad_max_diff = worst[4];
    r.grad_norm = std::sqrt(run_.across_ranks({sum_squares}, ReduceOp::Sum)[0]);
  }

  const LossBenchOptions& o_;
  Run& run_;
  StepTimer timer_;
  PoolMeter meter_;
  Tensor one_;  // d loss / d loss
};

std::string mib(double bytes) {
  return bytes < 0 ? "-" : fmt::format("{:.1f}", bytes / 1048576.0);
}

std::string size_text(int64_t bytes) {
  if (bytes % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  return fmt::format("{} MiB", bytes >> 20);
}

nlohmann::json to_json(const Result& r, const Run& run, const LossBenchOptions& o, double copy_gbps) {
  const double seconds = r.median_ms / 1e3;
  const double gbps = r.oom ? 0 : r.bytes / seconds / 1e9;
  auto number = [](double v, bool known) { return known ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return nlohmann::json{{"framework", "retort"},
                        {"variant", r.variant},
                        {"loss", r.loss},
                        {"tokens", run.tokens},
                        {"vocab", r.vocab},
                        {"tp", run.tp},
                        {"dtype", "bf16"},
                        {"device", run.device_name},
                        {"status", r.oom ? "oom" : "ok"},
                        {"error", r.error},
                        {"time_ms", number(r.median_ms, !r.oom)},
                        {"time_ms_min", number(r.min_ms, !r.oom)},
                        {"time_ms_mean", number(r.mean_ms, !r.oom)},
                        {"bytes", r.bytes},
                        {"bandwidth_gbps", number(gbps, !r.oom)},
                        {"copy_bandwidth_gbps", copy_gbps},
                        {"bandwidth_share", number(gbps / copy_gbps, !r.oom)},
                        {"logits_bytes", r.logits_bytes},
                        {"peak_extra_bytes", number(r.extra_bytes, !r.oom && r.extra_bytes >= 0)},
                        {"extra_per_logits", number(r.extra_bytes / r.logits_bytes, !r.oom && r.extra_bytes >= 0)},
                        {"loss_value", number(r.loss_value, !r.oom)},
                        {"grad_norm", number(r.grad_norm, !r.oom)},
                        {"grad_max_diff", number(r.grad_max_diff, !r.oom && r.grad_max_diff >= 0)},
                        {"iters", o.iters},
                        {"warmup", o.warmup}};
}

std::vector<std::string> relaunch_args(const LossBenchOptions& o) {
  std::vector<std::string> args{"--losses",    join(o.losses),
                                "--vocab",     join_numbers(o.vocabs),
                                "--tokens",    std::to_string(o.tokens),
                                "--tp",        std::to_string(o.tp),
                                "--iters",     std::to_string(o.iters),
                                "--warmup",    std::to_string(o.warmup),
                                "--logit-std", fmt::format("{}", o.logit_std),
                                "--seed",      std::to_string(o.seed),
                                "--copy-mib",  std::to_string(o.copy_mib)};
  if (!o.variants.empty()) args.insert(args.end(), {"--variants", join(o.variants)});
  if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
  if (!o.json.empty()) args.insert(args.end(), {"--json", o.json});
  if (!o.check_grads) args.push_back("--no-check-grads");
  if (!o.simulate_oom.empty()) args.insert(args.end(), {"--simulate-oom", join(o.simulate_oom)});
  return args;
}

}  // namespace

void add_loss_bench_options(CLI::App& cmd, LossBenchOptions& o) {
  cmd.add_option("--losses", o.losses, "ce (cross-entropy), fkl (forward KL), rkl (reverse KL)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--vocab", o.vocabs, "vocabulary sizes (each divisible by --tp)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--tokens", o.tokens, "rows of the logits")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--tp", o.tp, "ranks the vocabulary is split over (one GPU each); 1: one device")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--variants", o.variants, "fused, one_read (tp 1); fused_tp, manual_tp, gather (tp > 1); default all")
      ->delimiter(',');
  cmd.add_option("--device", o.device, "cpu, cuda or cuda:N (tp 1); cpu or cuda (tp > 1: NCCL, one GPU per rank)");
  cmd.add_option("--iters", o.iters, "timed steps (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  cmd.add_option("--logit-std", o.logit_std, "standard deviation of the random logits")->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of logits and targets")->capture_default_str();
  cmd.add_option("--copy-mib", o.copy_mib, "size of the copy that measures the bandwidth (0: 1024 GPU, 64 CPU)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd.add_option("--json", o.json, "rank 0 writes one JSON line per (loss, vocab, variant) here");
  cmd.add_flag("!--no-check-grads", o.check_grads,
               "tp > 1: skip comparing each variant's gradient with the first variant's (a host copy of each)");
  cmd.add_option("--simulate-oom", o.simulate_oom, "variants that fail with an out-of-memory error (tests that path)")
      ->delimiter(',');
}

int run_loss_bench(const LossBenchOptions& o, const std::vector<std::string>& self) {
  std::vector<LossKind> kinds;
  for (const auto& name : o.losses) kinds.push_back(parse_loss(name));
  RETORT_INPUT_CHECK(!kinds.empty() && !o.vocabs.empty(), "--losses and --vocab need at least one value each");
  for (int64_t v : o.vocabs)
    RETORT_INPUT_CHECK(v > 0 && v % o.tp == 0 && v <= INT32_MAX,
                       "--vocab {} must be positive and divide by --tp {} (each rank holds vocab / tp columns)", v,
                       o.tp);
  std::vector<std::string> variants = o.variants;
  const std::vector<std::string> allowed = o.tp == 1 ? std::vector<std::string>{"fused", "one_read"}
                                                     : std::vector<std::string>{"fused_tp", "manual_tp", "gather"};
  if (variants.empty()) variants = allowed;
  for (const auto& v : variants)
    RETORT_INPUT_CHECK(contains(allowed, v), "--variants {}: with --tp {} the variants are {}", v, o.tp, join(allowed));

  const LaunchEnv env = read_launch_env();
  if (o.tp > 1 && env.world_size == 1) {
    // Not under a launcher: start the ranks, each running this same command.
    std::vector<std::string> argv = self;
    const auto args = relaunch_args(o);
    argv.insert(argv.end(), args.begin(), args.end());
    LaunchOptions launch;
    launch.nproc = o.tp;
    return launch_local(argv, launch).exit_code;
  }
  RETORT_INPUT_CHECK(
      env.world_size == o.tp,
      "--tp {} needs exactly {} ranks, one per GPU, and this run has {}: use `retort bench loss --tp {}` "
      "or `retort launch --nproc {} -- ...`",
      o.tp, o.tp, env.world_size, o.tp, o.tp);

  Run run;
  run.tp = o.tp;
  run.rank = env.rank;
  run.tokens = o.tokens;
  const std::string device_text = o.device.empty() ? (cuda_device_count() > 0 ? "cuda" : "cpu") : o.device;
  run.device = Device::parse(device_text);
  if (run.device.is_cuda()) {
#ifndef RETORT_WITH_CUDA
    throw InputError("--device cuda needs a CUDA build of retort; this one has no CUDA backend (use --device cpu)");
#else
    if (o.tp > 1) {
      RETORT_INPUT_CHECK(device_text == "cuda",
                         "--device {}: with --tp > 1 every rank takes the GPU of its local rank; "
                         "say --device cuda",
                         device_text);
      run.device = Device::cuda(env.local_rank);
    }
    RETORT_INPUT_CHECK(run.device.index < cuda_device_count(),
                       "rank {} needs {} and this machine has {} GPU(s): every rank needs one of its own", env.rank,
                       run.device.str(), cuda_device_count());
    RETORT_CUDA_CHECK(cudaSetDevice(run.device.index));
    run.device_name = cuda::device_properties(run.device.index).name;
#endif
  }
  if (o.tp > 1) {
    run.world = connect_world(env);
    run.comm = run.world;
#ifdef RETORT_WITH_CUDA
    if (run.device.is_cuda()) run.comm = NcclCommunicator::create(run.world, run.device.index);
#endif
  }
  const bool main_rank = run.rank == 0;

  std::optional<std::ofstream> json;
  if (main_rank && !o.json.empty()) {
    json.emplace(o.json, std::ios::trunc);
    RETORT_INPUT_CHECK(json->good(), "cannot write --json file '{}'", o.json);
  }

  Bench bench(o, run);
  const int64_t copy_bytes = (o.copy_mib > 0 ? o.copy_mib : (run.device.is_cuda() ? 1024 : 64)) << 20;
  const double copy_gbps = bench.copy_gbps(copy_bytes);
  if (main_rank) {
    fmt::print(
        "# retort loss benchmark: forward + backward, {} tokens, bf16 logits, {} ({}){}; median of {} steps "
        "after {} warm-up\n",
        o.tokens, run.device_name, run.device.str(),
        o.tp > 1 ? fmt::format(", vocab split over {} ranks ({})", o.tp, run.comm->backend()) : "", o.iters, o.warmup);
    fmt::print(
        "# copy bandwidth {:.0f} GB/s ({} device-to-device, read + write bytes); bytes = logits read twice + "
        "gradient written once (+ teacher read twice for KL){}\n",
        copy_gbps, size_text(copy_bytes), o.tp > 1 ? ", per rank; time = the slowest rank" : "");
    fmt::print("# extra = peak pool memory of one step above the inputs (gradient included){}\n",
               run.device.is_cuda() ? ", per rank" : ": not measured on the CPU");
    fmt::print("# {:<4} {:>7} {:>3} {:<10} {:>9} {:>9} {:>8} {:>6} {:>10} {:>8} {:>12} {:>10}\n", "loss", "vocab", "tp",
               "variant", "time(ms)", "min(ms)", "GB/s", "share", "extra(MiB)", "x logits", "loss value",
               o.tp > 1 ? "grad diff" : "grad norm");
    std::fflush(stdout);
  }
  bench.emit_ = [&](const Result& r) {
    if (!main_rank) return;
    if (json) {
      *json << to_json(r, run, o, copy_gbps).dump() << '\n';
      json->flush();
    }
    if (r.oom) {
      fmt::print("  {:<4} {:>7} {:>3} {:<10} {:>9}   {}\n", r.loss, r.vocab, run.tp, r.variant, "OOM", r.error);
    } else {
      const double gbps = r.bytes / (r.median_ms / 1e3) / 1e9;
      const std::string check = o.tp > 1 ? (r.grad_max_diff >= 0 ? fmt::format("{:.2e}", r.grad_max_diff) : "(ref)")
                                         : fmt::format("{:.4g}", r.grad_norm);
      fmt::print("  {:<4} {:>7} {:>3} {:<10} {:>9.3f} {:>9.3f} {:>8.0f} {:>6.2f} {:>10} {:>8} {:>12.6f} {:>10}\n",
                 r.loss, r.vocab, run.tp, r.variant, r.median_ms, r.min_ms, gbps, gbps / copy_gbps, mib(r.extra_bytes),
                 r.extra_bytes < 0 ? "-" : fmt::format("{:.3f}", r.extra_bytes / r.logits_bytes), r.loss_value, check);
    }
    std::fflush(stdout);
  };

  for (size_t i = 0; i < kinds.size(); ++i) {
    for (int64_t vocab : o.vocabs) {
      const std::vector<Result> group = bench.run_group(kinds[i], o.losses[i], vocab, variants);
      if (!main_rank) continue;
      // Every variant computes the same loss: say how far apart they are.
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      int ok = 0;
      for (const auto& r : group) {
        if (r.oom) continue;
        lo = std::min(lo, r.loss_value);
        hi = std::max(hi, r.loss_value);
        ++ok;
      }
      if (ok > 1) {
        fmt::print("  {:<4} {:>7}     same loss over {} variants: {:.6f} .. {:.6f} (spread {:.2e})\n", o.losses[i],
                   vocab, ok, lo, hi, hi - lo);
        std::fflush(stdout);
      }
    }
  }
  if (run.device.is_cuda()) device_runtime::synchronize(run.device);
  if (run.comm) run.comm->barrier();
  return 0;
}

void add_bench_command(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: `retort bench loss` (fused losses, one GPU or tp ranks)");
  bench->require_subcommand(1);
  auto options = std::make_shared<LossBenchOptions>();
  CLI::App* loss = bench->add_subcommand(
      "loss",
      "forward + backward of the fused losses over bf16 logits: time, bandwidth as a share of the copy bandwidth, "
      "peak extra memory; --tp N compares the vocab-parallel variants on N GPUs");
  add_loss_bench_options(*loss, *options);
  loss->callback([options, exit_code] { *exit_code = run_loss_bench(*options, {"/proc/self/exe", "bench", "loss"}); });
}

}  // namespace retort::apps
