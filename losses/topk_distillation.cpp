#include "losses/topk_distillation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/topk_distillation_kernels.h"
#include "losses/vocab_parallel.h"

namespace retort::losses {

namespace {

namespace k = kernels::topk;
namespace vp = vocab_parallel;

constexpr const char* kOp = "topk_distillation_loss";

// The same signatures on both backends (topk_distillation_kernels.h): pick by the student's device.
#define RETORT_TOPK_DISPATCH(device, fn, ...) RETORT_VOCAB_DISPATCH(k, device, fn, __VA_ARGS__)

k::Kind kind_of(TopkDivergence d) {
  switch (d) {
    case TopkDivergence::ForwardKLRenormalized:
      return k::Kind::ForwardKLRenormalized;
    case TopkDivergence::ForwardKLRest:
      return k::Kind::ForwardKLRest;
    case TopkDivergence::ReverseKL:
      return k::Kind::ReverseKL;
    case TopkDivergence::Mixed:
      return k::Kind::Mixed;
    case TopkDivergence::ForwardKLSampled:
      return k::Kind::ForwardKLSampled;
  }
  throw InputError(fmt::format("{}: unknown divergence {}", kOp, static_cast<int>(d)));
}

bool in_unit_interval(double v) {
  return std::isfinite(v) && v >= 0 && v <= 1;
}

k::TopkParams params_for(const TopkDistillationOptions& o, bool has_labels, int64_t vocab_start) {
  const double t = o.temperature;
  RETORT_INPUT_CHECK(std::isfinite(t) && t > 0, "{}: the temperature must be a positive number, got {}", kOp, t);
  RETORT_INPUT_CHECK(in_unit_interval(o.kd_ratio), "{}: kd_ratio must be in [0, 1], got {}", kOp, o.kd_ratio);
  RETORT_INPUT_CHECK(in_unit_interval(o.forward_weight), "{}: forward_weight must be in [0, 1], got {}", kOp,
                     o.forward_weight);
  k::TopkParams p;
  p.kind = kind_of(o.divergence);
  const bool renormalized = p.kind == k::Kind::ForwardKLRenormalized;
  RETORT_INPUT_CHECK(renormalized || t == 1.0 || o.targets_at_temperature,
                     "{}: temperature {} with the {} needs the teacher at that temperature, which a cache made at "
                     "T = 1 does not hold; cache the teacher at T (log_softmax(teacher logits / T)) and set "
                     "targets_at_temperature, use T = 1, or use the renormalized forward KL",
                     kOp, t, p.kind == k::Kind::ForwardKLSampled ? "sampled targets" : "rest-bucket divergences");
  p.forward_weight = o.forward_weight;
  p.inv_temperature = 1.0 / t;
  p.teacher_scale = renormalized && !o.targets_at_temperature ? 1.0 / t : 1.0;
  p.loss_scale = o.scale_by_t_squared ? t * t : 1.0;
  p.kd_ratio = o.kd_ratio;
  RETORT_INPUT_CHECK(has_labels || !k::uses_ce(p),
                     "{}: kd_ratio {} mixes in the cross-entropy on the labels, but no labels were given", kOp,
                     o.kd_ratio);
  p.ce_separate = k::uses_ce(p) && t != 1.0;
  p.scan_columns = !renormalized || k::uses_ce(p);
  p.ignore_index = o.ignore_index;
  p.vocab_start = vocab_start;
  const vp::KernelReduction reduction = vp::kernel_reduction(o.reduction, o.normalizer, kOp);
  p.reduction = reduction.reduction;
  p.normalizer = reduction.normalizer;
  return p;
}

void check_student(const Tensor& student) {
  vp::check_logits(student, kOp, "student logits");
  vp::check_backend(student, kOp, "student logits");
}

// Indices [..., k] whose leading dims are the student's (or the rows flattened), log-probs of the same shape.
void check_targets(const Tensor& student, const TopkTargets& t) {
  Shape leading = student.shape();
  leading.pop_back();
  const int64_t rows = shape_numel(leading);
  RETORT_INPUT_CHECK(
      t.indices.defined() && t.indices.dtype() == DType::I32 && t.indices.ndim() >= 1 && t.indices.size(-1) > 0,
      "{}: teacher indices {} must be i32 [..., k] with k >= 1", kOp,
      t.indices.defined() ? t.indices.describe() : "(undefined)");
  Shape index_leading = t.indices.shape();
  index_leading.pop_back();
  const bool flat = t.indices.ndim() == 2 && t.indices.size(0) == rows;
  RETORT_INPUT_CHECK(index_leading == leading || flat,
                     "{}: teacher indices {} do not match student logits {}: one row of k ids per token, shape {} "
                     "+ [k]",
                     kOp, t.indices.describe(), student.describe(), shape_str(leading));
  RETORT_INPUT_CHECK(t.logprobs.defined() && is_floating(t.logprobs.dtype()) && t.logprobs.shape() == t.indices.shape(),
                     "{}: teacher log-probs {} must be floating and shaped like the indices {}", kOp,
                     t.logprobs.defined() ? t.logprobs.describe() : "(undefined)", t.indices.describe());
  if (t.labels.defined()) vp::check_row_labels(student, t.labels, kOp, "labels");
  if (t.mask.defined()) vp::check_row_labels(student, t.mask, kOp, "mask");
}

// Host copies are checked where they are, before any work: every rank holds the same targets, so every rank
// throws the same error at the same point and no peer waits in a collective.
void check_host_ids(const Tensor& indices, const Tensor& labels, const k::TopkParams& p, int64_t vocab_total) {
  const int64_t rows = indices.numel() / indices.size(-1), kk = indices.size(-1);
  const int32_t* ids = indices.data<int32_t>();
  // last_row[id] = 1 + the last row that named id: a repeat inside a row is one lookup, where sorting every row
  // cost milliseconds a step, more than the GPU kernels themselves.
  std::vector<int64_t> last_row(static_cast<size_t>(vocab_total), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* row = ids + r * kk;
    for (int64_t i = 0; i < kk; ++i) {
      RETORT_INPUT_CHECK(row[i] >= 0 && row[i] < vocab_total,
                         "{}: teacher index {} at row {}, slot {} is outside the vocabulary of {}: the top-k cache and "
                         "the student disagree on the vocabulary",
                         kOp, row[i], r, i, vocab_total);
      int64_t& seen = last_row[static_cast<size_t>(row[i])];
      RETORT_INPUT_CHECK(seen != r + 1,
                         "{}: teacher index {} appears twice in row {}: the k ids of a row must be distinct (a corrupt "
                         "top-k cache?)",
                         kOp, row[i], r);
      seen = r + 1;
    }
  }
  if (!labels.defined() || !k::uses_ce(p)) return;
  const int32_t* l = labels.data<int32_t>();
  for (int64_t r = 0; r < labels.numel(); ++r)
    RETORT_INPUT_CHECK(l[r] == p.ignore_index || (l[r] >= 0 && l[r] < vocab_total),
                       "{}: label {} at row {} is outside the vocabulary of {} (ignore_index is {}): the data and the "
                       "model disagree on the vocabulary",
                       kOp, l[r], r, vocab_total, p.ignore_index);
}

// A per-row tensor on the student's device, flattened to [rows]; undefined stays undefined.
Tensor on_device(const Tensor& t, Device device, int64_t rows) {
  return t.defined() ? t.to(device).view({rows}) : t;
}

}  // namespace

void check_topk_targets_on_host(const TopkTargets& targets, int64_t vocab_total,
                                const TopkDistillationOptions& options) {
  RETORT_CHECK(targets.indices.device().is_cpu() && (!targets.labels.defined() || targets.labels.device().is_cpu()),
               "{}: check_topk_targets_on_host takes host targets", kOp);
  check_host_ids(targets.indices, targets.labels, params_for(options, targets.labels.defined(), 0), vocab_total);
}

TopkDistillationForward topk_distillation_forward(const Tensor& student_in, const TopkTargets& targets,
                                                  const TopkDistillationOptions& options) {
  check_student(student_in);
  check_targets(student_in, targets);
  const auto group = vp::group_of(student_in, options.group, kOp);
  const vp::VocabShard shard = vp::vocab_shard(student_in, group, kOp);
  const Device device = student_in.device();
  const int64_t topk = targets.indices.size(-1);
  const k::TopkParams p = params_for(options, targets.labels.defined(), shard.start);
#ifdef RETORT_WITH_CUDA
  RETORT_INPUT_CHECK(device.is_cpu() || topk <= k::cuda::kMaxTopK,
                     "{}: k = {} teacher entries per row; the CUDA kernels take at most {}", kOp, topk,
                     k::cuda::kMaxTopK);
#endif
  // Wherever a host copy exists (host targets, or CPU logits), the ids are checked there.
  const int64_t vocab_total = shard.total;
  if (targets.indices.device().is_cpu() || device.is_cpu()) {
    const Tensor labels = targets.labels.defined() ? targets.labels.to(Device::cpu()) : Tensor();
    check_host_ids(targets.indices.to(Device::cpu()), labels, p, vocab_total);
  }

  const Tensor student = vp::real_columns(student_in.view({-1, shard.width}), shard);
  const int64_t rows = student.size(0);
  TopkDistillationForward out;
  TopkDistillationSaved& s = out.saved;
  s.vocab_valid = shard.valid;
  s.indices = targets.indices.to(device).view({rows, topk});
  s.logprobs = targets.logprobs.to(device).view({rows, topk});
  s.labels = on_device(targets.labels, device, rows);
  s.mask = on_device(targets.mask, device, rows);
  s.params = p;

  const DType stats = vp::stat_dtype(student);
  Tensor local_max = Tensor::empty({rows, k::kMaxColumns}, stats, device);
  Tensor partials = Tensor::empty({rows, k::kPartialColumns}, stats, device);
  s.row_stats = Tensor::empty({rows, k::kRowColumns}, stats, device);
  RETORT_TOPK_DISPATCH(device, local_stats, student, s.indices, s.logprobs, s.labels, p, local_max, partials,
                       s.row_stats);
  const Tensor global_max = vp::reduce_partials(
      group, rows, local_max, partials, shard, kOp,
      [&](const Tensor& global) { RETORT_TOPK_DISPATCH(device, rescale, local_max, global, partials); });
  out.loss = Tensor::empty({}, stats, device);
  s.denominator = Tensor::empty({}, stats, device);
  RETORT_TOPK_DISPATCH(device, finish, global_max, partials, s.labels, s.mask, p, s.row_stats, out.loss, s.denominator);
  return out;
}

void topk_distillation_backward(const Tensor& student_in, const TopkDistillationSaved& saved, const Tensor& grad_output,
                                Tensor& grad_student, bool accumulate) {
  check_student(student_in);
  vp::check_grad_buffer(student_in, grad_student, kOp, "_backward", "student logits");
  const int64_t vocab_local = student_in.size(-1);
  RETORT_INPUT_CHECK(saved.row_stats.defined() && saved.row_stats.size(0) * vocab_local == student_in.numel() &&
                         saved.row_stats.device() == student_in.device(),
                     "{}_backward: saved statistics of {} rows do not fit student logits {}", kOp,
                     saved.row_stats.defined() ? saved.row_stats.size(0) : 0, student_in.describe());
  const Device device = student_in.device();
  const Tensor g = vp::scalar_grad_output(grad_output, vp::stat_dtype(student_in), device, kOp);
  const vp::VocabShard shard{saved.params.vocab_start, vocab_local,
                             saved.vocab_valid > 0 ? saved.vocab_valid : vocab_local, 0};
  const Tensor student = vp::real_columns(student_in.view({-1, vocab_local}), shard);
  Tensor grad = grad_student.view({-1, vocab_local});
  vp::backward_on_real_columns(grad, shard, accumulate, [&](Tensor& real, bool add) {
    RETORT_TOPK_DISPATCH(device, backward, student, saved.indices, saved.logprobs, saved.labels, saved.mask,
                         saved.row_stats, g, saved.denominator, saved.params, add, real);
  });
}

Tensor topk_distillation_loss(const Tensor& student, const TopkTargets& targets,
                              const TopkDistillationOptions& options) {
  TopkDistillationForward forward = topk_distillation_forward(student, targets, options);
  // One node whose only input is the student: the teacher's values are constants. The closure holds the logits
  // and the saved statistics, never the loss.
  return autograd::record(forward.loss, "vocab_parallel_topk_distillation_loss", {student},
                          [student, saved = std::move(forward.saved)](const Tensor& g) {
                            Tensor grad = Tensor::empty(student.shape(), student.dtype(), student.device());
                            topk_distillation_backward(student, saved, g, grad);
                            return std::vector<Tensor>{grad};
                          });
}

}  // namespace retort::losses
