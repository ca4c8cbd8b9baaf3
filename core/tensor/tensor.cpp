#include "core/tensor/tensor.h"

#include <cstring>

#include "core/autograd/engine.h"
#include "core/kernels/kernels.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort {

std::string shape_str(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    RETORT_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
    n *= d;
  }
  return n;
}

namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  // f64 may live on a GPU as storage (exact collectives over NCCL, e.g. the sampler's fixed-point sums); the CUDA
  // kernels take f32 and bf16 only and name the dtype when given another.
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  return impl;
}

// Host buffer of `n` elements of `dtype` converted from doubles.
std::vector<std::byte> host_bytes_from(const double* values, int64_t n, DType dtype) {
  std::vector<std::byte> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32:
        reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(values[i]);
        break;
      case DType::F64:
        reinterpret_cast<double*>(bytes.data())[i] = values[i];
        break;
      case DType::BF16:
        reinterpret_cast<BFloat16*>(bytes.data())[i] = BFloat16(static_cast<float>(values[i]));
        break;
      case DType::I32:
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(values[i]);
        break;
    }
  }
  return bytes;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(make_impl(shape, dtype, device));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  device_runtime::memset_zero(t.raw_data(), t.nbytes(), device);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  kernels::fill(t, value);
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  RETORT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "{} values do not fill shape {}",
               values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype, device);
  auto bytes = host_bytes_from(values.data(), t.numel(), dtype);
  copy_bytes(t.raw_data(), device, bytes.data(), Device::cpu(), bytes.size());
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  return from_doubles(std::vector<double>(values.begin(), values.end()), shape, dtype, device);
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape, Device device) {
  RETORT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "{} values do not fill shape {}",
               values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::I32, device);
  copy_bytes(t.raw_data(), device, values.data(), Device::cpu(), t.nbytes());
  return t;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return from_doubles({value}, {}, dtype, device);
}

const Shape& Tensor::shape() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return impl_->shape;
}

int64_t Tensor::size(int dim) const {
  const int n = ndim();
  const int d = dim < 0 ? dim + n : dim;
  RETORT_CHECK(d >= 0 && d < n, "dimension {} out of range for a tensor of shape {}", dim, shape_str(shape()));
  return impl_->shape[d];
}

int64_t Tensor::numel() const {
  return shape_numel(shape());
}
DType Tensor::dtype() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return impl_->dtype;
}
Device Tensor::device() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return impl_->storage->device();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(dtype()), shape_str(shape()), device().str());
}

void* Tensor::raw_data() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return static_cast<std::byte*>(impl_->storage->data()) + impl_->offset_bytes;
}

Tensor Tensor::view(const Shape& new_shape) const {
  Shape resolved = new_shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      RETORT_CHECK(infer < 0, "only one dimension may be -1 in view {}", shape_str(new_shape));
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    RETORT_CHECK(known > 0 && numel() % known == 0, "cannot view {} as {}", describe(), shape_str(new_shape));
    resolved[infer] = numel() / known;
  }
  RETORT_CHECK(shape_numel(resolved) == numel(), "cannot view {} as {}: element counts differ", describe(),
               shape_str(new_shape));
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape = resolved;
  impl->autograd = {};
  return Tensor(impl);
}

Tensor Tensor::rows(int64_t start, int64_t length) const {
  RETORT_CHECK(ndim() >= 1, "rows() needs at least one dimension, got {}", describe());
  RETORT_CHECK(start >= 0 && length >= 0 && start + length <= size(0), "rows [{}, {}) out of range for {}", start,
               start + length, describe());
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape[0] = length;
  impl->offset_bytes += static_cast<size_t>(start * (numel() / std::max<int64_t>(size(0), 1))) * dtype_size(dtype());
  impl->autograd = {};
  return Tensor(impl);
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  copy_bytes(out.raw_data(), target, raw_data(), device(), nbytes());
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  kernels::cast(*this, out);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  copy_bytes(out.raw_data(), device(), raw_data(), device(), nbytes());
  return out;
}

void Tensor::copy_(const Tensor& src) {
  RETORT_CHECK(src.shape() == shape() && src.dtype() == dtype(), "copy_ from {} into {}: shapes or dtypes differ",
               src.describe(), describe());
  copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
  impl_->storage->bump_version();  // a cache of the old contents (a weight's working copy) is now stale
}

std::vector<double> Tensor::to_doubles() const {
  Tensor host = to(Device::cpu());
  const int64_t n = numel();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype()) {
      case DType::F32:
        out[i] = host.data<float>()[i];
        break;
      case DType::F64:
        out[i] = host.data<double>()[i];
        break;
      case DType::BF16:
        out[i] = static_cast<float>(host.data<BFloat16>()[i]);
        break;
      case DType::I32:
        out[i] = host.data<int32_t>()[i];
        break;
    }
  }
  return out;
}

std::vector<float> Tensor::to_floats() const {
  auto d = to_doubles();
  return std::vector<float>(d.begin(), d.end());
}

std::vector<int32_t> Tensor::to_ints() const {
  RETORT_CHECK(dtype() == DType::I32, "to_ints() on {}", describe());
  Tensor host = to(Device::cpu());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + numel());
}

double Tensor::item() const {
  RETORT_CHECK(numel() == 1, "item() needs a one-element tensor, got {}", describe());
  return to_doubles()[0];
}

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd.requires_grad;
}

Tensor& Tensor::set_requires_grad(bool value) {
  RETORT_CHECK(!value || is_floating(dtype()), "only floating-point tensors can require gradients, got {}", describe());
  impl_->autograd.requires_grad = value;
  return *this;
}

const Tensor& Tensor::grad() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return impl_->autograd.grad;
}
void Tensor::set_grad(const Tensor& grad) {
  impl_->autograd.grad = grad;
  impl_->autograd.grad_stale = false;
}
void Tensor::zero_grad() {
  impl_->autograd.grad = Tensor();
  impl_->autograd.grad_stale = false;
}

void Tensor::mark_grad_stale() {
  impl_->autograd.grad_stale = impl_->autograd.grad.defined();
}

bool Tensor::grad_is_stale() const {
  return defined() && impl_->autograd.grad_stale;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return defined() ? impl_->autograd.grad_fn : none;
}
void Tensor::set_grad_fn(std::shared_ptr<Node> node) {
  impl_->autograd.grad_fn = std::move(node);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = {};
  return Tensor(impl);
}

void Tensor::backward() const {
  RETORT_CHECK(numel() == 1, "backward() without a gradient needs a one-element tensor, got {}", describe());
  backward(Tensor::full(shape(), 1.0, dtype(), device()));
}

void Tensor::backward(const Tensor& grad_output) const {
  autograd::run_backward(*this, grad_output);
}

const ShardingSpec& Tensor::sharding() const {
  RETORT_CHECK(defined(), "use of an undefined tensor");
  return impl_->sharding;
}
void Tensor::set_sharding(ShardingSpec spec) {
  impl_->sharding = std::move(spec);
}

}  // namespace retort
