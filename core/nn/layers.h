#pragma once
// Dense building blocks. Parameters start at zero (norm weights at one); the model that owns them
// decides the initialisation (see GptModel::initialize), so a layer needs no knowledge of its place.
#include "core/kernels/decode_kernels.h"
#include "core/nn/module.h"
#include "core/ops/ops.h"

namespace retort::nn {

// y = x W^T + b, W [out, in].
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias);
  Tensor forward(const Tensor& x, DType compute_dtype = DType::F32) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  Tensor weight_, bias_;
};

enum class NormKind { LayerNorm, RmsNorm };
NormKind norm_kind_from_name(const std::string& name);  // "layernorm" | "rmsnorm"

class Norm : public Module {
 public:
  Norm(int64_t features, NormKind kind, bool bias, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  // The residual add before the norm with it, in one kernel each way (ops::add_layer_norm / add_rms_norm):
  // sum = x + r and normed = forward(sum).
  ops::ResidualNorm forward_added(const Tensor& x, const Tensor& r) const;
  // This norm as the prologue of a fused decode product (ops::small_m_linear), its weight and bias in `dtype`: the
  // dtype forward() would use, x's (or float32 for a norm kept in float32).
  kernels::RowNorm as_prologue(DType dtype) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined for RMSNorm and for a LayerNorm without bias
  NormKind kind() const { return kind_; }
  double eps() const { return eps_; }

 private:
  NormKind kind_;
  double eps_;
  Tensor weight_, bias_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t rows, int64_t features);
  Tensor forward(const Tensor& ids) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

// A float32 tensor in the compute dtype, differentiably (identity for f32). A trainable weight comes from its
// working copy (core/nn/working_copy.h), made once per optimizer step rather than on every forward; anything
// else is cast.
Tensor to_compute(const Tensor& x, DType compute_dtype);

}  // namespace retort::nn
