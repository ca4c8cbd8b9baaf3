#pragma once
// The global gradient norm and PyTorch's clip factor computed where the gradients live, with nothing read back to
// the host: the part of a training step that a CUDA graph replays (distill/train/graphed_train_step.h) cannot wait
// for the norm on the host as clip_grad_norm (grad_clip.h) does. One device and no tensor-parallel group.
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::optim {

// Writes, in `device`'s memory, *norm_out = the L2 norm of all `grads` together (f32 squares per chunk, the chunks
// summed in f64 in a fixed order: the same value on every run) and *factor_out = max_norm / (norm + 1e-6) when
// max_norm > 0 and the norm is finite and larger than max_norm, else 1 (clip_grad_norm's factor). Enqueues only
// on a GPU. Every gradient is an f32 tensor on `device`.
void grad_norm_and_clip_factor(const std::vector<Tensor>& grads, double max_norm, float* norm_out, float* factor_out,
                               Device device);

}  // namespace retort::optim
