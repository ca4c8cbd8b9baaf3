#include "parallel/tp/layers.h"

#include "core/nn/layers.h"
#include "core/ops/ops.h"
#include "core/util/error.h"
#include "parallel/tp/regions.h"
#include "parallel/tp/sharding.h"

namespace retort::tp {

int group_size(const std::shared_ptr<Communicator>& group) {
  return group ? group->size() : 1;
}
int group_rank(const std::shared_ptr<Communicator>& group) {
  return group ? group->rank() : 0;
}

namespace {

// The layout is recorded even without a group (a dense model): it is how a checkpoint written at one tp is
// re-split for another (apps/checkpoint), and is_sharded() stays false until there is a group.
void tag(Tensor& param, int dim, int blocks, const std::shared_ptr<Communicator>& group) {
  param.set_sharding({dim, blocks, group});
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features, bool bias,
                                           std::shared_ptr<Communicator> group, bool gather_output, int blocks)
    : group_(std::move(group)), gather_output_(gather_output) {
  const int tp = group_size(group_);
  RETORT_CHECK(!(gather_output && blocks > 1), "ColumnParallelLinear: gather_output needs one output block");
  check_divides(out_features / blocks, tp,
                fmt::format("the output width of a column-parallel layer ({} / {} blocks)", out_features, blocks));
  weight_ = register_parameter("weight", Tensor::zeros({out_features / tp, in_features}));
  tag(weight_, 0, blocks, group_);
  if (bias) {
    bias_ = register_parameter("bias", Tensor::zeros({out_features / tp}));
    tag(bias_, 0, blocks, group_);
  }
}

Tensor ColumnParallelLinear::forward(const Tensor& x, DType compute_dtype) const {
  Tensor y = ops::linear(copy_to_tp_region(nn::to_compute(x, compute_dtype), group_),
                         nn::to_compute(weight_, compute_dtype), nn::to_compute(bias_, compute_dtype));
  return gather_output_ ? gather_from_tp_region(y, group_) : y;
}

Tensor ColumnParallelLinear::forward_gelu(const Tensor& x, DType compute_dtype) const {
  Tensor y = ops::linear_gelu(copy_to_tp_region(nn::to_compute(x, compute_dtype), group_),
                              nn::to_compute(weight_, compute_dtype), nn::to_compute(bias_, compute_dtype));
  return gather_output_ ? gather_from_tp_region(y, group_) : y;
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, bool bias,
                                     std::shared_ptr<Communicator> group, bool input_is_parallel)
    : group_(std::move(group)), input_is_parallel_(input_is_parallel) {
  const int tp = group_size(group_);
  check_divides(in_features, tp, "the input width of a row-parallel layer");
  weight_ = register_parameter("weight", Tensor::zeros({out_features, in_features / tp}));
  tag(weight_, 1, 1, group_);
  if (bias) {
    bias_ = register_parameter("bias", Tensor::zeros({out_features}));
    tag(bias_, -1, 1, group_);
  }
}

Tensor RowParallelLinear::forward(const Tensor& x_in, DType compute_dtype) const {
  Tensor x = nn::to_compute(x_in, compute_dtype);
  if (!input_is_parallel_) x = scatter_to_tp_region(x, group_);
  // One rank holds the whole product: the bias goes into its epilogue. Across ranks it is added once, after the
  // partial products are summed.
  if (!is_distributed(group_))
    return ops::linear(x, nn::to_compute(weight_, compute_dtype), nn::to_compute(bias_, compute_dtype));
  Tensor partial = ops::linear(x, nn::to_compute(weight_, compute_dtype), Tensor());
  Tensor y = reduce_from_tp_region(partial, group_);
  return bias_.defined() ? ops::add_bias(y, nn::to_compute(bias_, compute_dtype)) : y;
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab_size, int64_t features,
                                               std::shared_ptr<Communicator> group)
    : group_(std::move(group)), vocab_size_(vocab_size) {
  const int tp = group_size(group_);
  check_divides(vocab_size, tp, "the vocabulary size (model.vocab_size / data.vocab_size)");
  vocab_start_ = group_rank(group_) * (vocab_size / tp);
  weight_ = register_parameter("weight", Tensor::zeros({vocab_size / tp, features}));
  tag(weight_, 0, 1, group_);
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  if (!is_distributed(group_)) return ops::embedding(weight_, ids);
  return reduce_from_tp_region(ops::embedding_shard(weight_, ids, vocab_start_, vocab_size_), group_);
}

Tensor vocab_parallel_logits(const Tensor& x, const Tensor& weight_shard, const std::shared_ptr<Communicator>& group,
                             DType compute_dtype) {
  Tensor logits = ops::linear(copy_to_tp_region(nn::to_compute(x, compute_dtype), group),
                              nn::to_compute(weight_shard, compute_dtype), Tensor());
  if (is_distributed(group)) logits.set_sharding({logits.ndim() - 1, 1, group});
  return logits;
}

void mark_replicated(const nn::Module& module, const std::shared_ptr<Communicator>& group) {
  if (!group) return;
  for (auto& [name, param] : module.named_parameters()) {
    if (param.sharding().partition_dim >= 0) continue;
    Tensor handle = param;
    handle.set_sharding({-1, 1, group});
  }
}

}  // namespace retort::tp
