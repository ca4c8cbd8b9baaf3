#include "core/nn/layers.h"

#include "core/nn/working_copy.h"
#include "core/ops/ops.h"
#include "core/util/error.h"

namespace retort::nn {

Tensor to_compute(const Tensor& x, DType compute_dtype) {
  if (!x.defined() || x.dtype() == compute_dtype) return x;
  if (Tensor copy = working_copy(x, compute_dtype); copy.defined()) return copy;
  return ops::cast(x, compute_dtype);
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias) {
  weight_ = register_parameter("weight", Tensor::zeros({out_features, in_features}));
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_features}));
}

Tensor Linear::forward(const Tensor& x, DType compute_dtype) const {
  return ops::linear(to_compute(x, compute_dtype), to_compute(weight_, compute_dtype),
                     to_compute(bias_, compute_dtype));
}

NormKind norm_kind_from_name(const std::string& name) {
  if (name == "layernorm") return NormKind::LayerNorm;
  if (name == "rmsnorm") return NormKind::RmsNorm;
  throw InputError(fmt::format("unknown norm '{}': use layernorm or rmsnorm", name));
}

Norm::Norm(int64_t features, NormKind kind, bool bias, double eps) : kind_(kind), eps_(eps) {
  weight_ = register_parameter("weight", Tensor::full({features}, 1.0));
  if (bias && kind == NormKind::LayerNorm) bias_ = register_parameter("bias", Tensor::zeros({features}));
}

Tensor Norm::forward(const Tensor& x) const {
  Tensor w = to_compute(weight_, x.dtype()), b = to_compute(bias_, x.dtype());
  return kind_ == NormKind::LayerNorm ? ops::layer_norm(x, w, b, eps_) : ops::rms_norm(x, w, eps_);
}

ops::ResidualNorm Norm::forward_added(const Tensor& x, const Tensor& r) const {
  Tensor w = to_compute(weight_, x.dtype()), b = to_compute(bias_, x.dtype());
  return kind_ == NormKind::LayerNorm ? ops::add_layer_norm(x, r, w, b, eps_) : ops::add_rms_norm(x, r, w, eps_);
}

kernels::RowNorm Norm::as_prologue(DType dtype) const {
  kernels::RowNorm norm;
  norm.kind = kind_ == NormKind::LayerNorm ? kernels::RowNormKind::LayerNorm : kernels::RowNormKind::RmsNorm;
  norm.weight = to_compute(weight_, dtype);
  norm.bias = to_compute(bias_, dtype);
  norm.eps = static_cast<float>(eps_);
  return norm;
}

Embedding::Embedding(int64_t rows, int64_t features) {
  weight_ = register_parameter("weight", Tensor::zeros({rows, features}));
}

Tensor Embedding::forward(const Tensor& ids) const {
  return ops::embedding(weight_, ids);
}

}  // namespace retort::nn
