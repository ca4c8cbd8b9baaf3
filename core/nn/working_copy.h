#pragma once
// Low-precision working copies of float32 master weights. A bf16 forward needs every weight in bf16; casting each
// weight on every forward costs a launch and a full read of the f32 master per weight per micro-batch. Instead a
// trainable f32 parameter keeps one copy in the compute dtype beside its master (TensorImpl::working_copy): made on
// first use, recast when the master's storage changed since (Storage::version: an optimizer step, a checkpoint
// load, copy_, a move to another device), or written by the optimizer in the same pass that updates the master
// (AdamW), which leaves it fresh. The forward reads the copy through a node whose backward hands the gradient to
// the master in f32, exactly as the backward of the cast it replaces.
#include "core/tensor/tensor.h"

namespace retort::nn {

// On unless RETORT_WEIGHT_CASTS=per-step is set (the old behaviour: one cast per weight per forward, kept so both
// can be measured in one binary); set_working_copies_enabled overrides the environment.
bool working_copies_enabled();
void set_working_copies_enabled(bool enabled);

// `master` in `dtype` through its working copy (recast first when stale). Undefined when the master does not keep
// one: copies are kept only for trainable f32 leaves (parameters) cast to bf16, only while enabled, and are made
// only with gradients enabled (a forward without them uses an existing copy but makes none).
Tensor working_copy(const Tensor& master, DType dtype);

// For an optimizer that writes the copy itself: the copy's buffer (bf16, the master's shape and device) when the
// master has one, else undefined. Once the buffer holds the cast of the updated master, mark_working_copy_fresh
// stamps it with the master's current version.
Tensor working_copy_buffer(const Tensor& master);
void mark_working_copy_fresh(const Tensor& master);

// The master's contents changed by a write its storage stamp cannot see (a kernel writing through data()):
// its copy is recast on next use. Optimizer::step calls it for every parameter it owns.
void mark_written(const Tensor& master);

}  // namespace retort::nn
