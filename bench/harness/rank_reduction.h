#pragma once
// Per-rank numbers combined over the ranks of a run. A step of a group ends when its last rank does, so a
// multi-rank benchmark reports the slowest rank's time (and the largest memory, the worst error), not rank 0's.
// The reductions run over a communicator of host tensors (the Gloo world), which works beside an NCCL group
// without touching the GPU's stream; a null communicator is a single process and returns the values unchanged.
#include <vector>

#include "parallel/comm/communicator.h"

namespace retort::bench {

// Elementwise `op` of `values` over the ranks; every rank calls it with as many values, together.
std::vector<double> reduce_over_ranks(Communicator* ranks, const std::vector<double>& values, ReduceOp op);

// Elementwise maximum over the ranks: the slowest rank's times.
std::vector<double> slowest_rank(Communicator* ranks, const std::vector<double>& values);
double slowest_rank(Communicator* ranks, double value);

// True on every rank when `flag` is true on one (a failure that all ranks must step around together).
bool any_rank(Communicator* ranks, bool flag);

}  // namespace retort::bench
