#include "optim/grad_clip.h"

#include <cmath>

#include "core/kernels/kernels.h"
#include "core/util/error.h"
#include "parallel/comm/communicator.h"

namespace retort::optim {

namespace {

double sum_of_squares(const Tensor& g) {
  Tensor partial = Tensor::empty({}, g.dtype() == DType::F64 ? DType::F64 : DType::F32, g.device());
  kernels::sum_squares(g, partial);
  return partial.item();
}

}  // namespace

double global_grad_norm(const std::vector<Tensor>& params) {
  // Under tensor parallelism a sharded parameter's squares are split over the tp ranks and must be summed
  // across them; a replicated one is the same on every rank and counts once. Only the sharded sum crosses ranks.
  double replicated = 0, sharded = 0;
  std::shared_ptr<Communicator> group;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const ShardingSpec& spec = p.sharding();
    if (spec.is_sharded()) {
      RETORT_CHECK(!group || group == spec.group, "global_grad_norm: parameters sharded over different tp groups");
      group = spec.group;
      sharded += sum_of_squares(g);
    } else {
      replicated += sum_of_squares(g);
    }
  }
  if (group && group->size() > 1) {
    Device device = Device::cpu();
    for (const Tensor& p : params)
      if (p.grad().defined()) device = p.grad().device();
    // f64 where the backend has it (Gloo); NCCL's f32 is plenty for a norm.
    Tensor total = Tensor::scalar(sharded, device.is_cpu() ? DType::F64 : DType::F32, device);
    group->all_reduce(total, ReduceOp::Sum);
    sharded = total.item();
  }
  return std::sqrt(replicated + sharded);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) kernels::scale(g, factor, g);
    }
  }
  return norm;
}

}  // namespace retort::optim
