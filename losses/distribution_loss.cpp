#include "losses/distribution_loss.h"

#include <cmath>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/distribution_kernels.h"
#include "losses/kernels/row_resident_kernels.h"
#include "losses/vocab_parallel.h"

namespace retort::losses {

namespace {

namespace k = kernels::distribution;
namespace vp = vocab_parallel;

constexpr const char* kOp = "distribution_loss";

// The same signatures on both backends (distribution_kernels.h): pick by the student's device.
#define RETORT_KD_DISPATCH(device, fn, ...) RETORT_VOCAB_DISPATCH(k, device, fn, __VA_ARGS__)

k::Kind kind_of(Divergence d) {
  switch (d) {
    case Divergence::ForwardKL:
      return k::Kind::ForwardKL;
    case Divergence::ReverseKL:
      return k::Kind::ReverseKL;
    case Divergence::SoftCrossEntropy:
      return k::Kind::SoftCrossEntropy;
  }
  throw InputError(fmt::format("{}: unknown divergence {}", kOp, static_cast<int>(d)));
}

double checked_temperature(double temperature) {
  RETORT_INPUT_CHECK(std::isfinite(temperature) && temperature > 0,
                     "{}: the temperature must be a positive number, got {}", kOp, temperature);
  return temperature;
}

k::DistributionParams params_of(Divergence divergence, double temperature, double loss_scale, int ignore_index) {
  k::DistributionParams p;
  p.divergence = kind_of(divergence);
  p.inv_temperature = 1.0 / checked_temperature(temperature);
  p.loss_scale = loss_scale;
  p.ignore_index = ignore_index;
  return p;
}

void check_inputs(const Tensor& student, const Tensor& teacher, const Tensor& labels) {
  vp::check_logits(student, kOp, "student logits");
  RETORT_INPUT_CHECK(teacher.defined() && is_floating(teacher.dtype()) && teacher.shape() == student.shape() &&
                         teacher.device() == student.device(),
                     "{}: teacher logits {} must match the student logits {}: same shape (this rank's vocabulary "
                     "shard), same device, a floating dtype",
                     kOp, teacher.defined() ? teacher.describe() : "(undefined)", student.describe());
  if (labels.defined()) vp::check_row_labels(student, labels, kOp, "labels");
  vp::check_backend(student, kOp, "student logits");
}

}  // namespace

DistributionLossForward distribution_loss_forward(const Tensor& student_in, const Tensor& teacher_in,
                                                  const Tensor& labels_in, const DistributionLossOptions& options) {
  check_inputs(student_in, teacher_in, labels_in);
  const double t = checked_temperature(options.temperature);
  const double loss_scale = options.scale_by_t_squared ? t * t : 1.0;
  k::DistributionParams p = params_of(options.divergence, t, loss_scale, options.ignore_index);
  const vp::KernelReduction reduction = vp::kernel_reduction(options.reduction, options.normalizer, kOp);
  p.reduction = reduction.reduction;
  p.normalizer = reduction.normalizer;
  const auto group = vp::group_of(student_in, options.group, kOp);

  const vp::VocabShard shard = vp::vocab_shard(student_in, group, kOp);
  const Device device = student_in.device();
  const Tensor student = vp::real_columns(student_in.view({-1, shard.width}), shard);
  const Tensor teacher = vp::real_columns(teacher_in.view({-1, shard.width}), shard);
  const Tensor labels = labels_in.defined() ? labels_in.to(device).view({-1}) : Tensor();
  const int64_t rows = student.size(0);
  const DType stats = vp::stat_dtype(student);
  Tensor local_max = Tensor::empty({rows, k::kMaxColumns}, stats, device);
  Tensor partials = Tensor::empty({rows, k::kPartialColumns}, stats, device);
  RETORT_KD_DISPATCH(device, local_stats, student, teacher, p, local_max, partials);
  const Tensor global_max = vp::reduce_partials(
      group, rows, local_max, partials, shard, kOp,
      [&](const Tensor& global) { RETORT_KD_DISPATCH(device, rescale, local_max, global, p, partials); });
  DistributionLossForward out;
  out.loss = Tensor::empty({}, stats, device);
  DistributionLossSaved& s = out.saved;
  s.labels = labels;
  s.row_stats = Tensor::empty({rows, k::kRowColumns}, stats, device);
  s.denominator = Tensor::empty({}, stats, device);
  RETORT_KD_DISPATCH(device, finish, global_max, partials, labels, p, s.row_stats, out.loss, s.denominator);
  s.divergence = options.divergence;
  s.temperature = t;
  s.loss_scale = loss_scale;
  s.ignore_index = options.ignore_index;
  s.vocab_valid = shard.valid;
  return out;
}

void distribution_loss_backward(const Tensor& student_in, const Tensor& teacher_in, const DistributionLossSaved& saved,
                                const Tensor& grad_output, Tensor& grad_student, bool accumulate) {
  vp::check_grad_buffer(student_in, grad_student, kOp, "_backward", "student logits");
  check_inputs(student_in, teacher_in, Tensor());
  const int64_t vocab_local = student_in.size(-1);
  RETORT_INPUT_CHECK(saved.row_stats.defined() && saved.row_stats.size(0) * vocab_local == student_in.numel(),
                     "{}_backward: saved statistics of {} rows do not fit student logits {}", kOp,
                     saved.row_stats.defined() ? saved.row_stats.size(0) : 0, student_in.describe());
  const Device device = student_in.device();
  const Tensor g = vp::scalar_grad_output(grad_output, vp::stat_dtype(student_in), device, kOp);
  const k::DistributionParams p = params_of(saved.divergence, saved.temperature, saved.loss_scale, saved.ignore_index);
  const vp::VocabShard shard{0, vocab_local, saved.vocab_valid > 0 ? saved.vocab_valid : vocab_local, 0};
  const Tensor student = vp::real_columns(student_in.view({-1, vocab_local}), shard);
  const Tensor teacher = vp::real_columns(teacher_in.view({-1, vocab_local}), shard);
  Tensor grad = grad_student.view({-1, vocab_local});
  vp::backward_on_real_columns(grad, shard, accumulate, [&](Tensor& real, bool add) {
    RETORT_KD_DISPATCH(device, backward, student, teacher, saved.labels, saved.row_stats, g, saved.denominator, p, add,
                       real);
  });
}

Tensor distribution_loss(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                         const DistributionLossOptions& options) {
  DistributionLossForward forward = distribution_loss_forward(student, teacher, labels, options);
  // One node whose only input is the student: the teacher is a constant. The closure holds the logits and the
  // saved statistics, never the loss.
  return autograd::record(forward.loss, "vocab_parallel_distribution_loss", {student},
                          [student, teacher = teacher.detach(), saved = std::move(forward.saved)](const Tensor& g) {
                            Tensor grad = Tensor::empty(student.shape(), student.dtype(), student.device());
                            distribution_loss_backward(student, teacher, saved, g, grad);
                            return std::vector<Tensor>{grad};
                          });
}

Tensor distribution_loss_with_grad(const Tensor& student_in, const Tensor& teacher_in, const Tensor& labels_in,
                                   Tensor& grad_student, const DistributionLossOptions& options, bool accumulate) {
  vp::check_grad_buffer(student_in, grad_student, kOp, "_with_grad", "student logits");
  check_inputs(student_in, teacher_in, labels_in);
#ifdef RETORT_WITH_CUDA
  const int64_t vocab = student_in.size(-1);
  if (!vp::group_of(student_in, options.group, kOp) && student_in.device().is_cuda()) {
    const Tensor student = student_in.view({-1, vocab});
    const Tensor teacher = teacher_in.view({-1, vocab});
    Tensor grad = grad_student.view({-1, vocab});
    if (kernels::row_resident::supported(student, teacher, grad)) {
      const double t = checked_temperature(options.temperature);
      k::DistributionParams p =
          params_of(options.divergence, t, options.scale_by_t_squared ? t * t : 1.0, options.ignore_index);
      const vp::KernelReduction reduction = vp::kernel_reduction(options.reduction, options.normalizer, kOp);
      const Device device = student.device();
      const Tensor labels = labels_in.defined() ? labels_in.to(device).view({-1}) : Tensor();
      const int64_t rows = student.size(0);
      Tensor denominator = Tensor::empty({}, DType::F32, device);
      Tensor row_loss = Tensor::empty({rows}, DType::F32, device);
      Tensor loss = Tensor::empty({}, DType::F32, device);
      kernels::row_resident::denominator(labels, rows, p.ignore_index, reduction.reduction, reduction.normalizer,
                                         denominator);
      kernels::row_resident::distribution(student, teacher, labels, p, denominator, accumulate, row_loss, grad);
      kernels::row_resident::reduce_loss(row_loss, denominator, loss);
      return loss;
    }
  }
#endif
  // Elsewhere: the two passes; an in-place gradient is written only after the forward has read the student.
  DistributionLossForward forward = distribution_loss_forward(student_in, teacher_in, labels_in, options);
  distribution_loss_backward(student_in, teacher_in, forward.saved, Tensor(), grad_student, accumulate);
  return forward.loss;
}

}  // namespace retort::losses
