#include "parallel/tp/regions.h"

#include "core/autograd/engine.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"

namespace retort::tp {
namespace {

Tensor summed(const Tensor& x, Communicator& group) {
  Tensor out = x.clone();  // the input may have other readers: reduce a copy
  group.all_reduce(out, ReduceOp::Sum);
  return out;
}

Tensor own_chunk(const Tensor& x, const Communicator& group) {
  const int64_t full = x.size(-1);
  RETORT_INPUT_CHECK(full % group.size() == 0, "the last dim of {} does not divide by the {} ranks of {}", x.describe(),
                     group.size(), group.describe());
  const int64_t chunk = full / group.size();
  return narrow_copy(x, -1, group.rank() * chunk, chunk);
}

}  // namespace

Tensor copy_to_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  if (!is_distributed(group)) return x;
  return autograd::record(x.view(x.shape()), "copy_to_tp_region", {x},
                          [group](const Tensor& g) { return std::vector<Tensor>{summed(g, *group)}; });
}

Tensor reduce_from_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  if (!is_distributed(group)) return x;
  return autograd::record(summed(x, *group), "reduce_from_tp_region", {x},
                          [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor gather_from_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  if (!is_distributed(group)) return x;
  return autograd::record(group->all_gather(x, -1), "gather_from_tp_region", {x},
                          [group](const Tensor& g) { return std::vector<Tensor>{own_chunk(g, *group)}; });
}

Tensor scatter_to_tp_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  if (!is_distributed(group)) return x;
  return autograd::record(own_chunk(x, *group), "scatter_to_tp_region", {x},
                          [group](const Tensor& g) { return std::vector<Tensor>{group->all_gather(g, -1)}; });
}

}  // namespace retort::tp
