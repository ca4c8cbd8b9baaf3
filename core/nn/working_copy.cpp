#include "core/nn/working_copy.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/kernels/kernels.h"

namespace retort::nn {

namespace {

bool enabled_from_environment() {
  const char* value = std::getenv("RETORT_WEIGHT_CASTS");
  return value == nullptr || std::strcmp(value, "per-step") != 0;
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag{enabled_from_environment()};
  return flag;
}

bool keeps_copy(const Tensor& master, DType dtype) {
  return working_copies_enabled() && dtype == DType::BF16 && master.dtype() == DType::F32 && master.is_leaf() &&
         master.requires_grad();
}

}  // namespace

bool working_copies_enabled() {
  return enabled_flag().load(std::memory_order_relaxed);
}

void set_working_copies_enabled(bool enabled) {
  enabled_flag().store(enabled, std::memory_order_relaxed);
}

Tensor working_copy(const Tensor& master, DType dtype) {
  if (!master.defined() || !keeps_copy(master, dtype)) return {};
  TensorImpl* impl = master.impl();
  std::shared_ptr<WorkingCopy>& copy = impl->working_copy;
  // Copies are made by training forwards only: a model that is only ever run without gradients (a teacher, a
  // loaded model sampling) keeps no second set of weights and is cast as it runs; one being trained reuses its
  // copies in evaluation too.
  if (!copy && !grad_enabled()) return {};
  if (!copy || copy->value.dtype() != dtype || copy->value.device() != master.device() ||
      copy->value.shape() != master.shape()) {
    // One copy per weight: a copy in another dtype or on another device is replaced, not kept beside.
    copy = std::make_shared<WorkingCopy>();
    copy->value = Tensor::empty(master.shape(), dtype, master.device());
  }
  const uint64_t version = impl->storage->version();
  if (copy->source_version != version) {  // versions start at 1: a new copy is always cast once
    kernels::cast(master, copy->value);
    copy->source_version = version;
  }
  // A fresh handle on the copy's storage carries this forward's node; the kept handle stays out of any graph.
  const Tensor view = copy->value.view(master.shape());
  return autograd::record(view, "working_copy", {master},
                          [](const Tensor& g) { return std::vector<Tensor>{g.to(DType::F32)}; });
}

Tensor working_copy_buffer(const Tensor& master) {
  if (!master.defined() || !master.impl()->working_copy) return {};
  const Tensor& value = master.impl()->working_copy->value;
  if (value.dtype() != DType::BF16 || value.device() != master.device() || value.shape() != master.shape()) return {};
  return value;
}

void mark_working_copy_fresh(const Tensor& master) {
  if (master.defined() && master.impl()->working_copy)
    master.impl()->working_copy->source_version = master.impl()->storage->version();
}

void mark_written(const Tensor& master) {
  if (master.defined()) master.impl()->storage->bump_version();
}

}  // namespace retort::nn
