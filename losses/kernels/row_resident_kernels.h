#pragma once
// One-read loss-and-gradient kernels for a whole (unsharded) vocabulary on one GPU.
//
// The two-pass kernels read the logits in the forward (statistics) and again in the backward (gradient): with the
// gradient written, three logits-sized transfers. When nothing has to be exchanged with other ranks between the
// statistics and the gradient, the row can stay on chip instead: a cluster of C thread blocks (C in 1, 2, 4, 8
// SMs, Hopper's distributed shared memory) copies one row into its shared memory with the tensor memory
// accelerator (one bulk copy per block, double-buffered so the next row streams in while this one is worked on),
// reduces the row's statistics across the cluster, and writes the gradient from shared memory: one read and one
// write. The gradient may be written over the logits themselves (in place) or into another buffer, or added to
// one. The loss of each row is written too; the caller reduces them.
//
// Used by cross_entropy_with_grad() and distribution_loss_with_grad() when supported() says the shapes, dtypes
// and alignment fit; otherwise those fall back to the two-pass kernels.
#include "core/tensor/tensor.h"
#include "losses/kernels/cross_entropy_kernels.h"
#include "losses/kernels/distribution_kernels.h"

#ifdef RETORT_WITH_CUDA
namespace retort::losses::kernels::row_resident {

// Whether the one-read path takes these buffers: a CUDA device of compute capability 9.0 or newer, rows of a
// vocabulary divisible by 8 whose bytes (student plus teacher) fit in 8 blocks' shared memory, and 16-byte
// aligned buffers. `teacher` and `grad` may be undefined tensors.
bool supported(const Tensor& logits, const Tensor& teacher, const Tensor& grad);

// denominator [] f32: the mean's valid-row count (at least 1), 1 for a sum, or the normalizer; labels i32 [rows]
// on the device, or undefined (every one of `rows` rows valid).
void denominator(const Tensor& labels, int64_t rows, int ignore_index, Reduction reduction, double normalizer,
                 Tensor& denominator);

// Cross-entropy: row_loss [N] f32 (0 for ignored rows), dlogits = (or += with accumulate) dloss/dlogits / denominator.
// dlogits may alias logits. p.vocab_start must be 0 and p.vocab_total the row length.
void cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, const Tensor& denominator,
                   bool accumulate, Tensor& row_loss, Tensor& dlogits);

// Distribution losses: row_loss [N] f32 (the scaled divergence; 0 for masked rows), dstudent = (or +=)
// dloss/dstudent / denominator. dstudent may alias student.
void distribution(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                  const distribution::DistributionParams& p, const Tensor& denominator, bool accumulate,
                  Tensor& row_loss, Tensor& dstudent);

// loss [] f32 = sum(row_loss) / denominator, in a fixed order (deterministic).
void reduce_loss(const Tensor& row_loss, const Tensor& denominator, Tensor& loss);

}  // namespace retort::losses::kernels::row_resident
#endif
