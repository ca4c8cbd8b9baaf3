#pragma once
// Moving between a full tensor and one rank's shard of it, following a ShardingSpec (core/tensor/tensor.h):
// the model uses shard_of to initialise and load sharded parameters from full values, and gather_full to
// rebuild the full tensor (exports, tests, checks against the dense model).
#include <vector>

#include "parallel/comm/communicator.h"

namespace retort::tp {

// The full shape of a tensor whose local shape is `local` under `spec` with `tp_size` ranks.
Shape full_shape(const Shape& local, const ShardingSpec& spec, int tp_size);

// Rank `tp_rank`'s shard of `full` (a copy). Replicated specs return full itself.
Tensor shard_of(const Tensor& full, const ShardingSpec& spec, int tp_rank, int tp_size);

// Collective over spec.group: the full tensor from every rank's shard (no autograd).
Tensor gather_full(const Tensor& local, const ShardingSpec& spec);

// The full tensor from all tp_size shards held in one place (rank order), e.g. a checkpoint written at another
// tp: the inverse of shard_of. Replicated specs return shards[0].
Tensor assemble_full(const std::vector<Tensor>& shards, const ShardingSpec& spec);

// `full` cut or zero-padded along `dim` to `extent`: a vocabulary table padded for one tp (parallel/models/gpt_model.h)
// re-fitted to another tp's padding. Only padding rows (zeros) are ever cut.
Tensor fit_extent(const Tensor& full, int dim, int64_t extent);

// An InputError naming `what` when `value` does not divide by tp_size (the message says what to change).
void check_divides(int64_t value, int tp_size, const std::string& what);

}  // namespace retort::tp
