#pragma once
// The top-k cache's distillation loss as a graphed training step records it (distill/train/graphable_loss.h): the
// batch's cache rows (the teacher's ids and log-probabilities, and the mask past the cache's end) and its labels are
// staged into pinned buffers, checked on the host first, and the loss with the plain cross-entropy reported beside it
// ("ce"; "kd" follows from the two as in the eager objective) is computed on the device. Exact and sampled caches
// alike: both give targets of [batch, seq, k].
#include <memory>

#include "distill/cache/topk_cache.h"
#include "distill/train/graphable_loss.h"
#include "losses/topk_distillation.h"

namespace retort::distill {

// `cache` must outlive the loss (the objective that opened it owns both).
std::shared_ptr<const GraphableLoss> graphable_cache_loss(const TopKCacheReader& cache,
                                                          const losses::TopkDistillationOptions& options);

}  // namespace retort::distill
