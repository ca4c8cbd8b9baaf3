#include "parallel/tp/vocab_topk.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/util/error.h"
#include "parallel/tp/vocab_shard.h"

namespace retort::tp {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The group to reduce over: the override when given, else the logits' own when they are split on the last
// dim. Null when there is nothing to reduce (no group, one rank, replicated logits).
std::shared_ptr<Communicator> vocab_group(const Tensor& logits, const std::shared_ptr<Communicator>& override) {
  if (override) return override->size() > 1 ? override : nullptr;
  const ShardingSpec& spec = logits.sharding();
  if (!spec.group || spec.group->size() == 1 || spec.partition_dim < 0) return nullptr;
  RETORT_INPUT_CHECK(spec.partition_dim == logits.ndim() - 1 && spec.blocks == 1,
                     "vocab_topk: logits {} are sharded on dim {} (in {} blocks), not on the vocabulary (the last "
                     "dim, one block); pass options.group to override",
                     logits.describe(), spec.partition_dim, spec.blocks);
  return spec.group;
}

// lse = M + log sum_r exp(l_r - M) from every rank's local log-sum-exp l_r: a MAX then a SUM all-reduce of
// one float per row. The few elementwise steps between them run on the host (O(rows) floats).
Tensor global_lse(const Tensor& local_lse, Communicator& group) {
  Tensor max_lse = local_lse.clone();
  group.all_reduce(max_lse, ReduceOp::Max);
  const std::vector<float> local = local_lse.to_floats(), top = max_lse.to_floats();
  std::vector<float> shifted(local.size());
  for (size_t i = 0; i < local.size(); ++i)  // a shard with no mass adds nothing (and -inf - -inf is NaN)
    shifted[i] = local[i] == kNegInf ? 0.f : std::exp(local[i] - top[i]);
  Tensor sum = Tensor::from_floats(shifted, local_lse.shape(), DType::F32, local_lse.device());
  group.all_reduce(sum, ReduceOp::Sum);
  std::vector<float> lse = sum.to_floats();
  for (size_t i = 0; i < lse.size(); ++i) lse[i] = top[i] == kNegInf ? kNegInf : top[i] + std::log(lse[i]);
  return Tensor::from_floats(lse, local_lse.shape(), DType::F32, local_lse.device());
}

}  // namespace

VocabTopK vocab_topk(const Tensor& logits, const VocabTopKOptions& options) {
  RETORT_INPUT_CHECK(logits.defined() && logits.ndim() >= 1 && logits.size(-1) > 0,
                     "vocab_topk: logits must be [..., V_local] with V_local > 0, got {}",
                     logits.defined() ? logits.describe() : "an undefined tensor");
  RETORT_INPUT_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::BF16,
                     "vocab_topk: logits {} must be f32 or bf16", logits.describe());
  RETORT_INPUT_CHECK(std::isfinite(options.temperature) && options.temperature > 0,
                     "vocab_topk: the temperature must be a positive number, got {}", options.temperature);
  const std::shared_ptr<Communicator> group = vocab_group(logits, options.group);
  const int tp = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const VocabShard shard = vocab_shard(logits, group, "vocab_topk");
  const int64_t local_vocab = shard.width, rows = logits.numel() / local_vocab;
  const int64_t vocab = shard.total;
  RETORT_INPUT_CHECK(options.k >= 1 && options.k <= vocab,
                     "vocab_topk: k = {} must lie in [1, {}] (the vocabulary over {} ranks of {} columns)", options.k,
                     vocab, tp, local_vocab);
  const Device device = logits.device();

  Tensor x = mask_padding(logits.view({rows, local_vocab}), shard);
  if (options.temperature != 1.0) {
    Tensor scaled = Tensor::empty({rows, local_vocab}, DType::F32, device);
    kernels::scale(x, static_cast<float>(1.0 / options.temperature), scaled);
    x = scaled;
  }

  const int64_t local_k = std::min<int64_t>(options.k, local_vocab);
  Tensor values = Tensor::empty({rows, local_k}, DType::F32, device);
  Tensor indices = Tensor::empty({rows, local_k}, DType::I32, device);
  Tensor lse = Tensor::empty({rows}, DType::F32, device);
  kernels::topk(x, rank * local_vocab, Tensor(), values, indices, lse);

  if (group) {
    lse = global_lse(lse, *group);
    // Candidates in rank order: among equal values a smaller position is a smaller global id, so the final
    // top-k's tie rule (smaller position) is the global one (smaller id).
    const Tensor candidate_values = group->all_gather(values, 1);
    const Tensor candidate_ids = group->all_gather(indices, 1);
    values = Tensor::empty({rows, options.k}, DType::F32, device);
    indices = Tensor::empty({rows, options.k}, DType::I32, device);
    Tensor no_lse;
    kernels::topk(candidate_values, 0, candidate_ids, values, indices, no_lse);
  }

  // log-probabilities = value - lse: rows x k floats, done on the host.
  std::vector<float> logprobs = values.to_floats();
  const std::vector<float> row_lse = lse.to_floats();
  const int64_t k = options.k;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) logprobs[static_cast<size_t>(r * k + i)] -= row_lse[static_cast<size_t>(r)];
  return VocabTopK{indices, Tensor::from_floats(logprobs, {rows, k}, DType::F32, device), lse};
}

}  // namespace retort::tp
