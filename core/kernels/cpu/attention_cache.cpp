// Attention over a key/value cache on the CPU: the reference the CUDA kernel is tested against, and the
// generation path of CPU runs. One (row, head) pair per task: the new keys and values go into the cache, then
// S = Q K[0:L]^T / sqrt(D) for the row's Tn queries, a softmax over each query's own prefix, O = P V[0:L].
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void attention_with_cache(const Tensor& qkv_in, const Tensor& starts, int n_head, Tensor& k_in, Tensor& v_in,
                          Tensor& out_in) {
  const Tensor qkv = widen(qkv_in);
  // bf16 caches are widened whole and rounded back: the CPU path is the reference, not the fast path.
  OutputSlot k_slot(k_in, true), v_slot(v_in, true), out_slot(out_in);
  Tensor &k_cache = k_slot.get(), &v_cache = v_slot.get(), &out = out_slot.get();
  const int32_t* start = starts.data<int32_t>();
  for (int64_t b = 0; b < qkv.size(0); ++b)
    RETORT_INPUT_CHECK(start[b] >= 0 && start[b] <= k_cache.size(2),
                       "attention_with_cache: row {} starts at {}, outside a cache of {} positions", b, start[b],
                       k_cache.size(2));
  dispatch_real(qkv.dtype(), [&]<typename T>() {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head, cap = k_cache.size(2);
    const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
    Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * cap * D > 32768)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t s = start[b];
        T* keys = k_cache.data<T>() + (b * n_head + h) * cap * D;
        T* values = v_cache.data<T>() + (b * n_head + h) * cap * D;
        const T* base = qkv.data<T>() + b * Tn * 3 * C + h * D;
        for (int64_t t = 0; t < Tn && s + t < cap; ++t) {
          std::copy_n(base + t * 3 * C + C, D, keys + (s + t) * D);
          std::copy_n(base + t * 3 * C + 2 * C, D, values + (s + t) * D);
        }
        const int64_t L = std::min(s + Tn, cap);  // keys any query of this call may see
        if (L <= 0) continue;
        ConstStridedMatrixMap<T> q(base, Tn, D, Eigen::OuterStride<>(3 * C));
        Eigen::Map<const RowMatrix<T>> k(keys, L, D), v(values, L, D);
        RowMatrix<T> p = scale * (q * k.transpose());
        for (int64_t t = 0; t < Tn; ++t) {
          const int64_t seen = std::min(s + t + 1, L);
          T* row = p.row(t).data();
          const T m = *std::max_element(row, row + seen);
          T total = 0;
          for (int64_t j = 0; j < seen; ++j) total += (row[j] = std::exp(row[j] - m));
          for (int64_t j = 0; j < seen; ++j) row[j] /= total;
          std::fill(row + seen, row + L, T(0));
        }
        StridedMatrixMap<T> o(out.data<T>() + b * Tn * C + h * D, Tn, D, Eigen::OuterStride<>(C));
        o.noalias() = p * v;
      }
    }
    Eigen::setNbThreads(0);
  });
  k_slot.finish();
  v_slot.finish();
  out_slot.finish();
}

}  // namespace retort::kernels::cpu
