#include "losses/cross_entropy.h"

#include <cmath>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "losses/kernels/row_resident_kernels.h"
#include "losses/vocab_parallel.h"

namespace retort::losses {

namespace {

namespace k = kernels;
namespace vp = vocab_parallel;

constexpr const char* kOp = "cross_entropy";

// The same signatures on both backends (cross_entropy_kernels.h): pick by the logits' device.
#define RETORT_CE_DISPATCH(device, fn, ...) RETORT_VOCAB_DISPATCH(k, device, fn, __VA_ARGS__)

k::CrossEntropyParams params_for(const CrossEntropyOptions& o, const vp::VocabShard& shard) {
  k::CrossEntropyParams p;
  p.ignore_index = o.ignore_index;
  p.vocab_start = shard.start;
  p.vocab_total = shard.total;
  RETORT_INPUT_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 1,
                     "cross_entropy: label_smoothing must be in [0, 1), got {}", o.label_smoothing);
  const double V = static_cast<double>(p.vocab_total);
  const bool megatron = o.smoothing_convention == LabelSmoothingConvention::Megatron;
  RETORT_INPUT_CHECK(!(megatron && o.label_smoothing > 0 && V < 2),
                     "cross_entropy: Megatron label smoothing spreads alpha over V - 1 other tokens and needs a "
                     "vocabulary of at least 2, got {}",
                     p.vocab_total);
  p.smoothing = megatron && o.label_smoothing > 0 ? o.label_smoothing * V / (V - 1) : o.label_smoothing;
  RETORT_INPUT_CHECK(std::isfinite(o.z_loss) && o.z_loss >= 0, "cross_entropy: z_loss must be >= 0, got {}", o.z_loss);
  p.z_loss = o.z_loss;
  const vp::KernelReduction reduction = vp::kernel_reduction(o.reduction, o.normalizer, kOp);
  p.reduction = reduction.reduction;
  p.normalizer = reduction.normalizer;
  return p;
}

k::CrossEntropyParams params_of(const CrossEntropySaved& s) {
  k::CrossEntropyParams p;
  p.ignore_index = s.ignore_index;
  p.vocab_start = s.vocab_start;
  p.vocab_total = s.vocab_global;
  p.smoothing = s.smoothing;
  p.z_loss = s.z_loss;
  return p;
}

// Host targets are checked where they are, before any work: every rank holds the same targets, so every rank
// throws the same error at the same point and no peer waits in a collective.
void check_host_targets(const Tensor& targets, const k::CrossEntropyParams& p) {
  const int32_t* t = targets.data<int32_t>();
  for (int64_t r = 0; r < targets.numel(); ++r)
    RETORT_INPUT_CHECK(t[r] == p.ignore_index || (t[r] >= 0 && t[r] < p.vocab_total),
                       "cross_entropy: target {} at row {} is outside the vocabulary of {} (ignore_index is {}): the "
                       "data and the model disagree on the vocabulary",
                       t[r], r, p.vocab_total, p.ignore_index);
}

}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits_in, const Tensor& targets_in,
                                          const CrossEntropyOptions& options) {
  vp::check_logits(logits_in, kOp, "logits");
  vp::check_row_labels(logits_in, targets_in, kOp, "targets");
  const auto group = vp::group_of(logits_in, options.group, kOp);
  const vp::VocabShard shard = vp::vocab_shard(logits_in, group, kOp);
  const k::CrossEntropyParams p = params_for(options, shard);

  const Device device = logits_in.device();
  vp::check_backend(logits_in, kOp, "logits");
  const Tensor logits = vp::real_columns(logits_in.view({-1, shard.width}), shard);
  const Tensor targets = targets_in.to(device).view({-1});
  // Wherever a host copy exists (host targets, or CPU logits), the ids are checked there.
  const bool host_targets = targets_in.device().is_cpu() || device.is_cpu();
  if (host_targets) check_host_targets(targets_in.device().is_cpu() ? targets_in : targets, p);
  const int64_t rows = logits.size(0);
  const DType stats = vp::stat_dtype(logits);
  Tensor local_max = Tensor::empty({rows}, stats, device);
  Tensor partials = Tensor::empty({rows, k::partial_columns(p)}, stats, device);
  RETORT_CE_DISPATCH(device, local_stats, logits, targets, p, local_max, partials);
  const Tensor global_max = vp::reduce_partials(
      group, rows, local_max, partials, shard, kOp,
      [&](const Tensor& global) { RETORT_CE_DISPATCH(device, rescale, local_max, global, shard.valid, partials); });
  CrossEntropyForward out;
  out.loss = Tensor::empty({}, stats, device);
  CrossEntropySaved& s = out.saved;
  s.targets = targets;
  s.lse = Tensor::empty({rows}, stats, device);
  s.denominator = Tensor::empty({}, stats, device);
  RETORT_CE_DISPATCH(device, finish, global_max, partials, targets, p, s.lse, out.loss, s.denominator);
#ifdef RETORT_WITH_CUDA
  // After the collectives, so a bad id stops every rank at the same point.
  if (!host_targets && device.is_cuda()) k::cuda::throw_if_bad_target(p);
#endif
  s.vocab_start = p.vocab_start;
  s.vocab_global = p.vocab_total;
  s.vocab_valid = shard.valid;
  s.ignore_index = p.ignore_index;
  s.smoothing = p.smoothing;
  s.z_loss = p.z_loss;
  return out;
}

void cross_entropy_backward(const Tensor& logits_in, const CrossEntropySaved& saved, const Tensor& grad_output,
                            Tensor& grad_logits, bool accumulate) {
  vp::check_grad_buffer(logits_in, grad_logits, kOp, "_backward", "logits");
  const int64_t vocab_local = logits_in.size(-1);
  RETORT_INPUT_CHECK(saved.lse.defined() && saved.lse.numel() * vocab_local == logits_in.numel(),
                     "cross_entropy_backward: saved statistics of {} rows do not fit logits {}",
                     saved.lse.defined() ? saved.lse.numel() : 0, logits_in.describe());
  const Device device = logits_in.device();
  const Tensor g = vp::scalar_grad_output(grad_output, vp::stat_dtype(logits_in), device, kOp);
  const vp::VocabShard shard{saved.vocab_start, vocab_local, saved.vocab_valid > 0 ? saved.vocab_valid : vocab_local,
                             saved.vocab_global};
  const Tensor logits = vp::real_columns(logits_in.view({-1, vocab_local}), shard);
  Tensor grad = grad_logits.view({-1, vocab_local});
  vp::backward_on_real_columns(grad, shard, accumulate, [&](Tensor& real, bool add) {
    RETORT_CE_DISPATCH(device, backward, logits, saved.targets, saved.lse, g, saved.denominator, params_of(saved), add,
                       real);
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  CrossEntropyForward forward = cross_entropy_forward(logits, targets, options);
  // One node for the whole loss; the closure holds the logits (an input) and the saved statistics, never the loss.
  return autograd::record(forward.loss, "vocab_parallel_cross_entropy", {logits},
                          [logits, saved = std::move(forward.saved)](const Tensor& g) {
                            Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
                            cross_entropy_backward(logits, saved, g, grad);
                            return std::vector<Tensor>{grad};
                          });
}

Tensor cross_entropy_with_grad(const Tensor& logits_in, const Tensor& targets_in, Tensor& grad_logits,
                               const CrossEntropyOptions& options, bool accumulate) {
  vp::check_grad_buffer(logits_in, grad_logits, kOp, "_with_grad", "logits");
#ifdef RETORT_WITH_CUDA
  const int64_t vocab = logits_in.ndim() >= 1 ? logits_in.size(-1) : 0;
  if (!vp::group_of(logits_in, options.group, kOp) && vocab > 0 && logits_in.device().is_cuda()) {
    vp::check_row_labels(logits_in, targets_in, kOp, "targets");
    const Tensor logits = logits_in.view({-1, vocab});
    Tensor grad = grad_logits.view({-1, vocab});
    if (k::row_resident::supported(logits, Tensor(), grad)) {
      const k::CrossEntropyParams p = params_for(options, vp::vocab_shard(logits_in, nullptr, kOp));
      const Device device = logits.device();
      const Tensor targets = targets_in.to(device).view({-1});
      const bool host_targets = targets_in.device().is_cpu();
      if (host_targets) check_host_targets(targets_in, p);
      const int64_t rows = logits.size(0);
      Tensor denominator = Tensor::empty({}, DType::F32, device);
      Tensor row_loss = Tensor::empty({rows}, DType::F32, device);
      Tensor loss = Tensor::empty({}, DType::F32, device);
      k::row_resident::denominator(targets, rows, p.ignore_index, p.reduction, p.normalizer, denominator);
      k::row_resident::cross_entropy(logits, targets, p, denominator, accumulate, row_loss, grad);
      k::row_resident::reduce_loss(row_loss, denominator, loss);
      if (!host_targets) k::cuda::throw_if_bad_target(p);
      return loss;
    }
  }
#endif
  // Elsewhere (a tp group, the CPU, a row too wide for one cluster): the two passes, the backward reading the
  // logits again. An in-place gradient is written only after the forward has read every logit.
  CrossEntropyForward forward = cross_entropy_forward(logits_in, targets_in, options);
  cross_entropy_backward(logits_in, forward.saved, Tensor(), grad_logits, accumulate);
  return forward.loss;
}

}  // namespace retort::losses
