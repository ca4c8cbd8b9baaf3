#include "optim/rekls/rekls_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace retort::optim {

#ifdef RETORT_WITH_CUDA
void scale_eigenvector_columns_cuda(const Tensor& q, const Tensor& lam, float dim, float eps, Tensor& out);
void rotated_adam_update_cuda(const Tensor& g, Tensor& m, Tensor& v, Tensor& u, const RotatedAdamStep& s);
#endif

namespace {
void check_f32_on(const Tensor& t, Device device, const char* what) {
  RETORT_CHECK(t.dtype() == DType::F32 && t.device() == device, "REKLS: {} must be f32 on {}, got {}", what,
               device.str(), t.describe());
}
}  // namespace

void scale_eigenvector_columns(const Tensor& q, const Tensor& lam, double dim, double eps, Tensor& out) {
  const int64_t k = lam.numel();
  RETORT_CHECK(q.ndim() == 2 && q.size(0) == k && q.size(1) == k && out.shape() == q.shape(),
               "scale_eigenvector_columns: eigenvectors {} and output {} do not fit eigenvalues {}", q.describe(),
               out.describe(), lam.describe());
  for (const auto& [t, what] : {std::pair{&q, "eigenvectors"}, {&lam, "eigenvalues"}, {&out, "output"}})
    check_f32_on(*t, q.device(), what);
  if (q.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    scale_eigenvector_columns_cuda(q, lam, static_cast<float>(dim), static_cast<float>(eps), out);
    return;
#else
    throw Error("REKLS on a GPU tensor in a build without CUDA");
#endif
  }
  const float* qp = q.data<float>();
  const float* lp = lam.data<float>();
  float* op = out.data<float>();
  const float d = static_cast<float>(dim), e = static_cast<float>(eps);
  std::vector<float> inverse(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) inverse[j] = 1.0f / (d * std::max(lp[j], e));
#pragma omp parallel for if (k * k > 65536)
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) op[i * k + j] = qp[i * k + j] * inverse[j];
}

void rotated_adam_update(const Tensor& g, Tensor& m, Tensor& v, Tensor& u, const RotatedAdamStep& s) {
  RETORT_CHECK(m.shape() == g.shape() && v.shape() == g.shape() && u.shape() == g.shape(),
               "rotated_adam_update: shapes differ: g {}, m {}, v {}, u {}", g.describe(), m.describe(), v.describe(),
               u.describe());
  for (const auto& [t, what] : {std::pair{&g, "gradient"}, {&m, "exp_avg"}, {&v, "exp_avg_sq"}, {&u, "update"}})
    check_f32_on(*t, g.device(), what);
  if (g.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    rotated_adam_update_cuda(g, m, v, u, s);
    return;
#else
    throw Error("REKLS on a GPU tensor in a build without CUDA");
#endif
  }
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  float* up = u.data<float>();
  const int64_t n = g.numel();
#pragma omp parallel for simd if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = gp[i];
    mp[i] = s.beta1 * mp[i] + (1.0f - s.beta1) * gi;
    vp[i] = s.beta2 * vp[i] + (1.0f - s.beta2) * gi * gi;
    up[i] = (mp[i] / s.bias_correction1) / (std::sqrt(vp[i] / s.bias_correction2) + s.eps);
  }
}

}  // namespace retort::optim
