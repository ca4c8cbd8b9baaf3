#pragma once
// Tensor: a cheap handle to shared storage with a shape, a dtype and a device. Tensors are row-major and
// contiguous; a view (reshape, a range of rows) shares the storage at an offset. Autograd metadata rides
// on the handle: requires_grad, the accumulated gradient, and the node that produced the tensor.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/dtype.h"
#include "core/tensor/storage.h"

namespace retort {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Communicator;  // parallel/ defines it; core only carries the pointer.

// How a tensor is split across tensor-parallel ranks. Set by the TP layers; read by losses and optimizers.
// The full tensor's partition_dim is made of `blocks` equal blocks (3 for a fused q|k|v projection, 1 for
// everything else); rank r holds the r-th 1/size chunk of every block, concatenated in block order. With one
// block that is the plain contiguous 1/size chunk.
struct ShardingSpec {
  int partition_dim = -1;  // -1: replicated (or not distributed at all when group is null)
  int blocks = 1;
  std::shared_ptr<Communicator> group;
  // The full extent of partition_dim when the shards are padded: a vocabulary of V ids split over tp ranks in
  // equal shards of ceil(V / tp) columns, the last shard(s) ending in columns that are no id. 0: the shards
  // hold local size x tp real entries, no padding.
  int64_t full_extent = 0;

  bool is_sharded() const { return group != nullptr && partition_dim >= 0; }
};

struct Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised memory (GPU memory comes from the stream-ordered pool).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
  // Host data converted to `dtype` and copied to `device`.
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
                            Device device = Device::cpu());
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F64,
                             Device device = Device::cpu());
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t size(int dim) const;  // negative dims count from the end
  int ndim() const { return static_cast<int>(shape().size()); }
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  std::string describe() const;  // "f32[4, 8] on cpu"

  void* raw_data() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }

  // Views (share storage, no autograd): same numel reshaped, or rows [start, start + length) of dim 0.
  Tensor view(const Shape& shape) const;
  Tensor rows(int64_t start, int64_t length) const;

  // Copies (no autograd). to() returns *this when nothing changes.
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor clone() const;
  void copy_(const Tensor& src);  // same shape and dtype, any devices

  std::vector<float> to_floats() const;    // host copy converted to float
  std::vector<double> to_doubles() const;  // host copy converted to double
  std::vector<int32_t> to_ints() const;
  double item() const;  // one-element tensor to host

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool value = true);
  const Tensor& grad() const;  // undefined until a backward pass reaches it
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops the gradient
  // Keeps the gradient's buffer but not its values: the next gradient a backward brings is copied over it instead
  // of added to it (a CUDA graph that replays a backward needs the buffer at a fixed address). Until then the
  // gradient counts as absent (grad_is_stale()): an optimizer skips it.
  void mark_grad_stale();
  bool grad_is_stale() const;
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> node);
  bool is_leaf() const { return grad_fn() == nullptr; }
  Tensor detach() const;  // same storage, no history
  void backward() const;  // for a one-element tensor: seeds d(self)/d(self) = 1
  void backward(const Tensor& grad_output) const;

  // Tensor parallelism.
  const ShardingSpec& sharding() const;
  void set_sharding(ShardingSpec spec);

  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  bool grad_stale = false;  // mark_grad_stale(): the next gradient overwrites `grad`
  std::shared_ptr<Node> grad_fn;
};

// A float32 master's low-precision copy for the forward (core/nn/working_copy.h): the cast a forward would make,
// kept between steps. Valid while source_version equals the master storage's version().
struct WorkingCopy {
  Tensor value;
  uint64_t source_version = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset_bytes = 0;
  Shape shape;
  DType dtype = DType::F32;
  AutogradMeta autograd;
  ShardingSpec sharding;
  std::shared_ptr<WorkingCopy> working_copy;  // at most one, in the last compute dtype asked for
};

}  // namespace retort
