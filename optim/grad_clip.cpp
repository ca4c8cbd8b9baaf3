#include "optim/grad_clip.h"

#include <cmath>

#include "core/kernels/kernels.h"

namespace retort::optim {

double global_grad_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor partial = Tensor::empty({}, g.dtype() == DType::F64 ? DType::F64 : DType::F32, g.device());
    kernels::sum_squares(g, partial);
    total += partial.item();
  }
  return std::sqrt(total);
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
