#include "parallel/tp/sharding.h"

#include <vector>

#include "core/tensor/slicing.h"
#include "core/util/error.h"

namespace retort::tp {

Shape full_shape(const Shape& local, const ShardingSpec& spec, int tp_size) {
  Shape shape = local;
  if (spec.partition_dim >= 0) shape.at(static_cast<size_t>(spec.partition_dim)) *= tp_size;
  return shape;
}

void check_divides(int64_t value, int tp_size, const std::string& what) {
  RETORT_INPUT_CHECK(tp_size > 0 && value % tp_size == 0,
                     "{} = {} does not divide by parallel.tp = {}: choose a tp that divides it (or change the model "
                     "size)",
                     what, value, tp_size);
}

Tensor shard_of(const Tensor& full, const ShardingSpec& spec, int tp_rank, int tp_size) {
  if (spec.partition_dim < 0 || tp_size == 1) return full;
  const int dim = spec.partition_dim;
  const int64_t block = full.size(dim) / spec.blocks;
  RETORT_CHECK(block * spec.blocks == full.size(dim) && block % tp_size == 0,
               "shard_of: dim {} of {} does not split into {} blocks of {} shards", dim, full.describe(), spec.blocks,
               tp_size);
  const int64_t chunk = block / tp_size;
  std::vector<Tensor> parts;
  for (int b = 0; b < spec.blocks; ++b) parts.push_back(narrow_copy(full, dim, b * block + tp_rank * chunk, chunk));
  return parts.size() == 1 ? parts[0] : concat(parts, dim);
}

Tensor fit_extent(const Tensor& full, int dim, int64_t extent) {
  const int64_t have = full.size(dim);
  if (have == extent) return full;
  if (have > extent) return narrow_copy(full, dim, 0, extent);
  Shape rest = full.shape();
  rest.at(static_cast<size_t>(dim < 0 ? dim + full.ndim() : dim)) = extent - have;
  return concat({full, Tensor::zeros(rest, full.dtype(), full.device())}, dim);
}

Tensor gather_full(const Tensor& local, const ShardingSpec& spec) {
  if (spec.partition_dim < 0 || !spec.group || spec.group->size() == 1) return local.clone();
  const int dim = spec.partition_dim, tp = spec.group->size();
  const Tensor gathered = spec.group->all_gather(local, dim);
  if (spec.blocks == 1) return gathered;
  std::vector<Tensor> shards;
  for (int r = 0; r < tp; ++r) shards.push_back(narrow_copy(gathered, dim, r * local.size(dim), local.size(dim)));
  return assemble_full(shards, spec);
}

Tensor assemble_full(const std::vector<Tensor>& shards, const ShardingSpec& spec) {
  RETORT_CHECK(!shards.empty(), "assemble_full needs at least one shard");
  if (spec.partition_dim < 0 || shards.size() == 1) return shards[0];
  const int dim = spec.partition_dim;
  const int64_t chunk = shards[0].size(dim) / spec.blocks;
  RETORT_CHECK(chunk * spec.blocks == shards[0].size(dim), "assemble_full: dim {} of {} does not split into {} blocks",
               dim, shards[0].describe(), spec.blocks);
  // Each shard is `blocks` chunks, so block b of the full tensor is chunk b of every shard in rank order.
  std::vector<Tensor> parts;
  for (int b = 0; b < spec.blocks; ++b)
    for (const Tensor& shard : shards) {
      RETORT_CHECK(shard.shape() == shards[0].shape(), "assemble_full: shards of different shapes ({} and {})",
                   shard.describe(), shards[0].describe());
      parts.push_back(spec.blocks == 1 ? shard : narrow_copy(shard, dim, b * chunk, chunk));
    }
  return concat(parts, dim);
}

}  // namespace retort::tp
