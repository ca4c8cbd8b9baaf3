#include "losses/cross_entropy.h"

#include <cmath>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "losses/kernels/row_resident_kernels.h"

namespace retort::losses {

namespace {

namespace k = kernels;

// The same signatures on both backends (cross_entropy_kernels.h): pick by the logits' device.
#ifdef RETORT_WITH_CUDA
#define RETORT_CE_DISPATCH(device, fn, ...) ((device).is_cuda() ? k::cuda::fn(__VA_ARGS__) : k::cpu::fn(__VA_ARGS__))
#else
#define RETORT_CE_DISPATCH(device, fn, ...) k::cpu::fn(__VA_ARGS__)
#endif

std::shared_ptr<Communicator> vocab_group(const Tensor& logits, const CrossEntropyOptions& options) {
  if (options.group) return options.group->size() > 1 ? options.group : nullptr;
  const ShardingSpec& spec = logits.sharding();
  if (!spec.group || spec.group->size() == 1 || spec.partition_dim < 0) return nullptr;  // replicated: local
  RETORT_INPUT_CHECK(spec.partition_dim == logits.ndim() - 1 && spec.blocks == 1,
                     "cross_entropy: logits {} are sharded on dim {} (in {} blocks), not on the vocabulary (the last "
                     "dim, one block); pass options.group to override",
                     logits.describe(), spec.partition_dim, spec.blocks);
  return spec.group;
}

k::CrossEntropyParams params_for(const CrossEntropyOptions& o, int64_t vocab_local, int tp_rank, int tp_size) {
  k::CrossEntropyParams p;
  p.ignore_index = o.ignore_index;
  p.vocab_start = static_cast<int64_t>(tp_rank) * vocab_local;
  p.vocab_total = vocab_local * tp_size;
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
  p.reduction = o.reduction == Reduction::Sum ? k::Reduction::Sum : k::Reduction::Mean;
  if (o.normalizer) {
    RETORT_INPUT_CHECK(std::isfinite(*o.normalizer) && *o.normalizer > 0,
                       "cross_entropy: the normalizer must be positive, got {}", *o.normalizer);
    p.reduction = k::Reduction::Normalizer;
    p.normalizer = *o.normalizer;
  }
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

// Targets must be leading dims of the logits (or those rows flattened).
void check_target_shape(const Tensor& logits, const Tensor& targets) {
  Shape leading = logits.shape();
  leading.pop_back();
  const bool flat = targets.ndim() == 1 && targets.numel() == shape_numel(leading);
  RETORT_INPUT_CHECK(targets.dtype() == DType::I32 && (targets.shape() == leading || flat),
                     "cross_entropy: targets {} do not match logits {}: one i32 id per row, shape {}",
                     targets.describe(), logits.describe(), shape_str(leading));
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

DType stat_dtype(const Tensor& logits) {
  return logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
}

}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits_in, const Tensor& targets_in,
                                          const CrossEntropyOptions& options) {
  RETORT_INPUT_CHECK(logits_in.ndim() >= 1 && logits_in.size(-1) > 0 && is_floating(logits_in.dtype()),
                     "cross_entropy: logits {} need a floating dtype and a non-empty vocabulary (last) dim",
                     logits_in.describe());
  check_target_shape(logits_in, targets_in);
  const int64_t vocab_local = logits_in.size(-1);
  const auto group = vocab_group(logits_in, options);
  const int tp_rank = group ? group->rank() : 0, tp_size = group ? group->size() : 1;
  const k::CrossEntropyParams p = params_for(options, vocab_local, tp_rank, tp_size);

  const Device device = logits_in.device();
#ifndef RETORT_WITH_CUDA
  RETORT_CHECK(device.is_cpu(), "cross_entropy: logits {} are on a GPU, but this build has no CUDA backend",
               logits_in.describe());
#endif
  const Tensor logits = logits_in.view({-1, vocab_local});
  const Tensor targets = targets_in.to(device).view({-1});
  // Wherever a host copy exists (host targets, or CPU logits), the ids are checked there.
  const bool host_targets = targets_in.device().is_cpu() || device.is_cpu();
  if (host_targets) check_host_targets(targets_in.device().is_cpu() ? targets_in : targets, p);
  const int64_t rows = logits.size(0);
  const DType stats = stat_dtype(logits);
  Tensor local_max = Tensor::empty({rows}, stats, device);
  Tensor partials = Tensor::empty({rows, k::partial_columns(p)}, stats, device);
  RETORT_CE_DISPATCH(device, local_stats, logits, targets, p, local_max, partials);
  Tensor global_max = local_max;
  // Every rank has the same rows, so all of them skip (or run) the collectives together.
  if (group && rows > 0) {
    global_max = local_max.clone();
    group->all_reduce(global_max, ReduceOp::Max);
    RETORT_CE_DISPATCH(device, rescale, local_max, global_max, vocab_local, partials);
    group->all_reduce(partials, ReduceOp::Sum);
  }
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
  s.ignore_index = p.ignore_index;
  s.smoothing = p.smoothing;
  s.z_loss = p.z_loss;
  return out;
}

void cross_entropy_backward(const Tensor& logits_in, const CrossEntropySaved& saved, const Tensor& grad_output,
                            Tensor& grad_logits, bool accumulate) {
  RETORT_INPUT_CHECK(grad_logits.shape() == logits_in.shape() && grad_logits.device() == logits_in.device() &&
                         is_floating(grad_logits.dtype()),
                     "cross_entropy_backward: the gradient buffer {} does not match logits {}", grad_logits.describe(),
                     logits_in.describe());
  const int64_t vocab_local = logits_in.size(-1);
  RETORT_INPUT_CHECK(saved.lse.defined() && saved.lse.numel() * vocab_local == logits_in.numel(),
                     "cross_entropy_backward: saved statistics of {} rows do not fit logits {}",
                     saved.lse.defined() ? saved.lse.numel() : 0, logits_in.describe());
  const Device device = logits_in.device();
  const DType stats = stat_dtype(logits_in);
  Tensor g = grad_output.defined() ? grad_output : Tensor::full({}, 1.0, stats, device);
  RETORT_INPUT_CHECK(g.numel() == 1, "cross_entropy_backward: grad_output {} must hold one value", g.describe());
  g = g.to(stats).to(device);
  const Tensor logits = logits_in.view({-1, vocab_local});
  Tensor grad = grad_logits.view({-1, vocab_local});
  RETORT_CE_DISPATCH(device, backward, logits, saved.targets, saved.lse, g, saved.denominator, params_of(saved),
                     accumulate, grad);
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
  RETORT_INPUT_CHECK(grad_logits.shape() == logits_in.shape() && grad_logits.device() == logits_in.device() &&
                         is_floating(grad_logits.dtype()),
                     "cross_entropy_with_grad: the gradient buffer {} does not match logits {}", grad_logits.describe(),
                     logits_in.describe());
#ifdef RETORT_WITH_CUDA
  const int64_t vocab = logits_in.ndim() >= 1 ? logits_in.size(-1) : 0;
  if (!vocab_group(logits_in, options) && vocab > 0 && logits_in.device().is_cuda()) {
    check_target_shape(logits_in, targets_in);
    const Tensor logits = logits_in.view({-1, vocab});
    Tensor grad = grad_logits.view({-1, vocab});
    if (k::row_resident::supported(logits, Tensor(), grad)) {
      const k::CrossEntropyParams p = params_for(options, vocab, 0, 1);
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
