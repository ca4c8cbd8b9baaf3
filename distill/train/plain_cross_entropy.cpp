#include "distill/train/plain_cross_entropy.h"

#include "core/autograd/grad_mode.h"
#include "losses/cross_entropy.h"

namespace retort::distill {

double plain_cross_entropy(const Tensor& logits, const Tensor& labels, int ignore_index) {
  NoGradGuard no_grad;
  losses::CrossEntropyOptions plain;
  plain.ignore_index = ignore_index;
  return losses::cross_entropy(logits, labels, plain).item();
}

}  // namespace retort::distill
