#include "bench/harness/rank_reduction.h"

namespace retort::bench {

std::vector<double> reduce_over_ranks(Communicator* ranks, const std::vector<double>& values, ReduceOp op) {
  if (ranks == nullptr) return values;
  Tensor t = Tensor::from_doubles(values, {static_cast<int64_t>(values.size())});
  ranks->all_reduce(t, op);
  return t.to_doubles();
}

std::vector<double> slowest_rank(Communicator* ranks, const std::vector<double>& values) {
  return reduce_over_ranks(ranks, values, ReduceOp::Max);
}

double slowest_rank(Communicator* ranks, double value) {
  return slowest_rank(ranks, std::vector<double>{value})[0];
}

bool any_rank(Communicator* ranks, bool flag) {
  return slowest_rank(ranks, flag ? 1.0 : 0.0) != 0;
}

}  // namespace retort::bench
