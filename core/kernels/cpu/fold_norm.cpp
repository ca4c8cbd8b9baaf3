// A LayerNorm's weight and bias folded into the product after it, on the CPU (the reference of
// core/kernels/cuda/fold_norm.cu): W' = W diag(gamma) rounded to the weight's dtype, the sums of W' as stored, and
// bias + W beta, summed in float32 (float64 for f64).
#include <vector>

#include "core/kernels/cpu/decode_storage.h"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cpu {
using namespace decode_storage;

void fold_norm_into_linear(const Tensor& norm_weight, const Tensor& norm_bias, const Tensor& weight, const Tensor& bias,
                           NormedLinear& out) {
  with_storage(weight.dtype(), "fold_norm_into_linear", [&]<typename S>() {
    using A = Acc<S>;
    const int64_t N = weight.size(0), K = weight.size(1);
    const S* w = weight.data<S>();
    const S* b = bias.defined() ? bias.data<S>() : nullptr;
    S* folded = out.weight.data<S>();
    A* colsum = out.colsum.data<A>();
    A* shift = out.shift.data<A>();
    std::vector<A> gamma(static_cast<size_t>(K)), beta(static_cast<size_t>(K), A(0));
    for (int64_t k = 0; k < K; ++k) {
      gamma[static_cast<size_t>(k)] = static_cast<A>(element(norm_weight, k));
      if (norm_bias.defined()) beta[static_cast<size_t>(k)] = static_cast<A>(element(norm_bias, k));
    }
#pragma omp parallel for if (N * K > (1 << 18))
    for (int64_t n = 0; n < N; ++n) {
      A sum = 0, moved = b != nullptr ? widen_value(b[n]) : A(0);
      for (int64_t k = 0; k < K; ++k) {
        const A v = widen_value(w[n * K + k]);
        const S scaled = narrow_value<S>(v * gamma[static_cast<size_t>(k)]);
        folded[n * K + k] = scaled;
        sum += widen_value(scaled);
        moved += v * beta[static_cast<size_t>(k)];
      }
      colsum[n] = sum;
      shift[n] = moved;
    }
  });
}

}  // namespace retort::kernels::cpu
