#include "parallel/data_parallel.h"

#include "core/kernels/kernels.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"

namespace retort {

void average_gradients(const std::vector<Tensor>& params, const std::shared_ptr<Communicator>& dp_group) {
  if (!dp_group || dp_group->size() == 1 || params.empty()) return;
  int64_t total = 0;
  for (const Tensor& p : params) total += p.numel();
  const DType dtype = params.front().dtype();
  const Device device = params.front().device();
  Tensor flat = Tensor::empty({total}, dtype, device);
  int64_t offset = 0;
  for (const Tensor& p : params) {
    RETORT_CHECK(p.dtype() == dtype && p.device() == device, "average_gradients: {} differs from {}", p.describe(),
                 params.front().describe());
    Tensor handle = p;
    if (!handle.grad().defined()) handle.set_grad(Tensor::zeros(p.shape(), dtype, device));
    copy_into_narrow(flat, 0, offset, handle.grad().view({p.numel()}));
    offset += p.numel();
  }
  dp_group->all_reduce(flat, ReduceOp::Sum);
  kernels::scale(flat, 1.0f / static_cast<float>(dp_group->size()), flat);
  offset = 0;
  for (const Tensor& p : params) {
    Tensor grad = p.grad();
    grad.copy_(narrow_copy(flat, 0, offset, p.numel()).view(p.shape()));
    offset += p.numel();
  }
}

}  // namespace retort
