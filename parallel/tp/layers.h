#pragma once
// Tensor-parallel layers (Megatron-LM's split): each holds only its rank's shard of the weight, tags it with a
// ShardingSpec so losses, clipping and the optimizer know the split, and wraps its compute in the conjugate
// regions of regions.h. With a null group (or one rank) each is exactly its dense counterpart in core/nn.
#include <memory>

#include "core/nn/module.h"
#include "parallel/comm/communicator.h"

namespace retort::tp {

int group_size(const std::shared_ptr<Communicator>& group);
int group_rank(const std::shared_ptr<Communicator>& group);

// y = x W^T + b with W's output rows split over the group: W local [out / tp, in]. The input is replicated;
// the output is this rank's slice of the features (or, with gather_output, the full output on every rank).
// `blocks` > 1 splits each of that many equal output blocks separately (a fused q|k|v projection: every rank
// gets its heads' rows of q, of k and of v).
class ColumnParallelLinear : public nn::Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool bias, std::shared_ptr<Communicator> group,
                       bool gather_output = false, int blocks = 1);
  Tensor forward(const Tensor& x, DType compute_dtype = DType::F32) const;
  // gelu(forward(x)) with the GELU in the product's epilogue (ops::linear_gelu): GELU is elementwise, so this
  // rank's slice of the features is all it needs.
  Tensor forward_gelu(const Tensor& x, DType compute_dtype = DType::F32) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  std::shared_ptr<Communicator> group_;
  bool gather_output_;
  Tensor weight_, bias_;
};

// y = x W^T + b with W's input columns split over the group: W local [out, in / tp]. The input is this rank's
// slice of the features (input_is_parallel, the output of a ColumnParallelLinear) or the full input, which
// is then split here. The partial products are summed over the group; the bias is replicated and added once.
class RowParallelLinear : public nn::Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, bool bias, std::shared_ptr<Communicator> group,
                    bool input_is_parallel = true);
  Tensor forward(const Tensor& x, DType compute_dtype = DType::F32) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  std::shared_ptr<Communicator> group_;
  bool input_is_parallel_;
  Tensor weight_, bias_;
};

// An embedding table split by rows (vocabulary) over the group: rank r holds ids [r V / tp, (r + 1) V / tp).
// Each rank looks up the ids it owns (zeros for the others) and the rows are summed over the group.
class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(int64_t vocab_size, int64_t features, std::shared_ptr<Communicator> group);
  Tensor forward(const Tensor& ids) const;
  const Tensor& weight() const { return weight_; }
  int64_t vocab_start() const { return vocab_start_; }

 private:
  std::shared_ptr<Communicator> group_;
  int64_t vocab_size_, vocab_start_;
  Tensor weight_;
};

// The LM head on a vocab-sharded weight [V / tp, C] (a VocabParallelEmbedding's table when tied): logits
// [..., V / tp] for this rank's vocabulary slice, tagged as sharded on the last dim over the group. They are
// never gathered: the vocab-parallel losses in losses/ read the tag and reduce O(tokens) statistics instead.
Tensor vocab_parallel_logits(const Tensor& x, const Tensor& weight_shard, const std::shared_ptr<Communicator>& group,
                             DType compute_dtype = DType::F32);

// Tags every parameter of `module` that has no sharding yet as replicated over `group` (norms, position
// embeddings, row-parallel biases), so gradient clipping counts it once rather than once per rank.
void mark_replicated(const nn::Module& module, const std::shared_ptr<Communicator>& group);

}  // namespace retort::tp
