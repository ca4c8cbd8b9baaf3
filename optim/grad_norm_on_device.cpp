#include "optim/grad_norm_on_device.h"

#include <cmath>

#include "core/util/error.h"

namespace retort::optim {

#ifdef RETORT_WITH_CUDA
void grad_norm_and_clip_factor_cuda(const std::vector<Tensor>& grads, double max_norm, float* norm_out,
                                    float* factor_out, Device device);
#endif

void grad_norm_and_clip_factor(const std::vector<Tensor>& grads, double max_norm, float* norm_out, float* factor_out,
                               Device device) {
  for (const Tensor& g : grads)
    RETORT_CHECK(g.dtype() == DType::F32 && g.device() == device,
                 "grad_norm_and_clip_factor needs f32 gradients on {}, got {}", device.str(), g.describe());
  if (device.is_cuda()) {
#ifdef RETORT_WITH_CUDA
    grad_norm_and_clip_factor_cuda(grads, max_norm, norm_out, factor_out, device);
    return;
#else
    throw Error("grad_norm_and_clip_factor on a GPU in a build without CUDA");
#endif
  }
  double sum = 0;
  for (const Tensor& g : grads) {
    const float* x = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) sum += static_cast<double>(x[i]) * x[i];
  }
  const double norm = std::sqrt(sum);
  *norm_out = static_cast<float>(norm);
  *factor_out =
      max_norm > 0 && std::isfinite(norm) && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

}  // namespace retort::optim
