// Attention over a key/value cache on the CPU: the reference the CUDA kernel is tested against, and the
// generation path of CPU runs. One (row, key/value head) pair per task: the new keys and values go into the cache,
// then for each query head of the group S = Q K[0:L]^T / sqrt(D) for the row's Tn queries, a softmax over each
// query's own prefix, O = P V[0:L]. Packed qkv and separate q, k, v are read through row strides by the same code.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {

// q, k, v rows of the new positions: base pointers (batch 0, head 0, position 0) and row strides.
struct NewRows {
  Tensor q, k, v;  // widened to f32 when stored in bf16
  int64_t q_offset = 0, k_offset = 0, v_offset = 0, q_stride = 0, kv_stride = 0;
};

void with_cache(const NewRows& in, int64_t B, int64_t Tn, int n_head, int n_kv_head, const Tensor& starts, Tensor& k_in,
                Tensor& v_in, Tensor& out_in) {
  // bf16 caches are widened whole and rounded back: the CPU path is the reference, not the fast path.
  OutputSlot k_slot(k_in, true), v_slot(v_in, true), out_slot(out_in);
  Tensor &k_cache = k_slot.get(), &v_cache = v_slot.get(), &out = out_slot.get();
  const int32_t* start = starts.data<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    RETORT_INPUT_CHECK(start[b] >= 0 && start[b] <= k_cache.size(2),
                       "attention_with_cache: row {} starts at {}, outside a cache of {} positions", b, start[b],
                       k_cache.size(2));
  dispatch_real(in.q.dtype(), [&]<typename T>() {
    const int64_t D = k_cache.size(3), C = n_head * D, cap = k_cache.size(2), group = n_head / n_kv_head;
    const T scale = T(1.0 / std::sqrt(static_cast<double>(D)));
    const T* q_base = in.q.data<T>() + in.q_offset;
    const T* k_base = in.k.data<T>() + in.k_offset;
    const T* v_base = in.v.data<T>() + in.v_offset;
    Eigen::setNbThreads(1);
#pragma omp parallel for collapse(2) if (B * n_head * Tn * cap * D > 32768)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t kvh = 0; kvh < n_kv_head; ++kvh) {
        const int64_t s = start[b];
        T* keys = k_cache.data<T>() + (b * n_kv_head + kvh) * cap * D;
        T* values = v_cache.data<T>() + (b * n_kv_head + kvh) * cap * D;
        const T* new_k = k_base + b * Tn * in.kv_stride + kvh * D;
        const T* new_v = v_base + b * Tn * in.kv_stride + kvh * D;
        for (int64_t t = 0; t < Tn && s + t < cap; ++t) {
          std::copy_n(new_k + t * in.kv_stride, D, keys + (s + t) * D);
          std::copy_n(new_v + t * in.kv_stride, D, values + (s + t) * D);
        }
        const int64_t L = std::min(s + Tn, cap);  // keys any query of this call may see
        if (L <= 0) continue;
        Eigen::Map<const RowMatrix<T>> k(keys, L, D), v(values, L, D);
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          ConstStridedMatrixMap<T> q(q_base + b * Tn * in.q_stride + h * D, Tn, D, Eigen::OuterStride<>(in.q_stride));
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
    }
    Eigen::setNbThreads(0);
  });
  k_slot.finish();
  v_slot.finish();
  out_slot.finish();
}

}  // namespace

void attention_with_cache(const Tensor& qkv_in, const Tensor& starts, int n_head, Tensor& k_cache, Tensor& v_cache,
                          Tensor& out) {
  const Tensor qkv = widen(qkv_in);
  const int64_t C = qkv.size(2) / 3;
  with_cache({qkv, qkv, qkv, 0, C, 2 * C, 3 * C, 3 * C}, qkv.size(0), qkv.size(1), n_head, n_head, starts, k_cache,
             v_cache, out);
}

void attention_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& starts, int n_head,
                          int n_kv_head, Tensor& k_cache, Tensor& v_cache, Tensor& out) {
  with_cache({widen(q), widen(k), widen(v), 0, 0, 0, q.size(2), k.size(2)}, q.size(0), q.size(1), n_head, n_kv_head,
             starts, k_cache, v_cache, out);
}

}  // namespace retort::kernels::cpu
