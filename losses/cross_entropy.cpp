#include "losses/cross_entropy.h"

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/cross_entropy_kernels.h"

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
  if (!spec.group || spec.group->size() == 1) return nullptr;
  RETORT_INPUT_CHECK(spec.partition_dim == logits.ndim() - 1 && spec.blocks == 1,
                     "cross_entropy: logits {} are sharded on dim {}, not on the vocabulary (the last dim)",
                     logits.describe(), spec.partition_dim);
  return spec.group;
}

k::CrossEntropyParams params_for(const CrossEntropyOptions& o, int64_t vocab_local, int tp_rank, int tp_size) {
  k::CrossEntropyParams p;
  p.ignore_index = o.ignore_index;
  p.vocab_start = static_cast<int64_t>(tp_rank) * vocab_local;
  p.vocab_total = vocab_local * tp_size;
  RETORT_INPUT_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 1, "label smoothing must be in [0, 1), got {}",
                     o.label_smoothing);
  const double V = static_cast<double>(p.vocab_total);
  const bool megatron = o.smoothing_convention == LabelSmoothingConvention::Megatron;
  p.smoothing = static_cast<float>(megatron && V > 1 ? o.label_smoothing * V / (V - 1) : o.label_smoothing);
  p.z_loss = static_cast<float>(o.z_loss);
  p.reduction = o.reduction == Reduction::Sum ? k::Reduction::Sum : k::Reduction::Mean;
  if (o.normalizer) {
    RETORT_INPUT_CHECK(*o.normalizer > 0, "cross_entropy: the normalizer must be positive, got {}", *o.normalizer);
    p.reduction = k::Reduction::Normalizer;
    p.normalizer = static_cast<float>(*o.normalizer);
  }
  return p;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, const CrossEntropyOptions& options) {
  RETORT_INPUT_CHECK(logits_in.ndim() >= 1 && logits_in.size(-1) > 0, "cross_entropy: logits {} have no vocabulary",
                     logits_in.describe());
  const int64_t vocab_local = logits_in.size(-1);
  RETORT_INPUT_CHECK(targets_in.dtype() == DType::I32 && targets_in.numel() * vocab_local == logits_in.numel(),
                     "cross_entropy: targets {} do not match logits {} (one i32 id per row of logits)",
                     targets_in.describe(), logits_in.describe());
  const auto group = vocab_group(logits_in, options);
  const int tp_rank = group ? group->rank() : 0, tp_size = group ? group->size() : 1;
  const k::CrossEntropyParams p = params_for(options, vocab_local, tp_rank, tp_size);

  const Device device = logits_in.device();
  const Tensor logits = logits_in.view({-1, vocab_local});
  const Tensor targets = targets_in.device() == device ? targets_in.view({-1}) : targets_in.to(device).view({-1});
  const int64_t rows = logits.size(0);
  Tensor local_max = Tensor::empty({rows}, DType::F32, device);
  Tensor partials = Tensor::empty({rows, k::kPartials}, DType::F32, device);
  RETORT_CE_DISPATCH(device, local_stats, logits, targets, p, local_max, partials);
  Tensor global_max = local_max;
  if (group) {
    global_max = local_max.clone();
    group->all_reduce(global_max, ReduceOp::Max);
    RETORT_CE_DISPATCH(device, rescale, local_max, global_max, vocab_local, partials);
    group->all_reduce(partials, ReduceOp::Sum);
  }
  Tensor lse = Tensor::empty({rows}, DType::F32, device);
  Tensor loss = Tensor::empty({}, DType::F32, device);
  Tensor denominator = Tensor::empty({}, DType::F32, device);
  RETORT_CE_DISPATCH(device, finish, global_max, partials, targets, p, lse, loss, denominator);

  return autograd::record(loss, "vocab_parallel_cross_entropy", {logits_in},
                          [logits, targets, lse, denominator, p, shape = logits_in.shape()](const Tensor& g) {
                            Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
                            const Tensor grad_output = g.dtype() == DType::F32 ? g : g.to(DType::F32);
                            RETORT_CE_DISPATCH(logits.device(), backward, logits, targets, lse, grad_output,
                                               denominator, p, false, dlogits);
                            return std::vector<Tensor>{dlogits.view(shape)};
                          });
}

}  // namespace retort::losses
