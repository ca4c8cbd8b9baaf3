// The decode kernels on the CPU, the reference of the CUDA ones: plain loops that round where the GPU rounds (the
// normed row, the linear output before a residual add or SwiGLU, the result), in float32 for f32 and bf16 storage and
// float64 for f64.
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/decode_storage.h"
#include "core/kernels/decode_kernels.h"
#include "core/tensor/dtype.h"
#include "core/util/error.h"

namespace retort::kernels::cpu {
namespace {
using namespace decode_storage;

template <typename A>
A silu(A g) {
  return g * (static_cast<A>(1) / (static_cast<A>(1) + std::exp(-g)));
}

template <typename S>
void small_m_linear_typed(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                          const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                          Tensor& out) {
  using A = Acc<S>;
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  const S* xs = x.data<S>();
  // The rows the product reads: x, or its norm rounded to the storage dtype.
  std::vector<A> rows(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    const S* xr = xs + m * K;
    A* hr = rows.data() + m * K;
    if (norm.kind == RowNormKind::None) {
      for (int64_t k = 0; k < K; ++k) hr[k] = widen_value(xr[k]);
      continue;
    }
    A mu = 0;
    if (norm.kind == RowNormKind::LayerNorm) {
      for (int64_t k = 0; k < K; ++k) mu += widen_value(xr[k]);
      mu /= static_cast<A>(K);
    }
    A q = 0;
    for (int64_t k = 0; k < K; ++k) {
      const A d = widen_value(xr[k]) - mu;
      q += d * d;
    }
    const A rs = static_cast<A>(1) / std::sqrt(q / static_cast<A>(K) + static_cast<A>(norm.eps));
    for (int64_t k = 0; k < K; ++k) {
      const A w = static_cast<A>(element(norm.weight, k));
      const A b = norm.bias.defined() ? static_cast<A>(element(norm.bias, k)) : A(0);
      hr[k] = stored<S>((widen_value(xr[k]) - mu) * rs * w + b);
    }
  }
  const S* w1 = weight.data<S>();
  const S* w2 = weight2.defined() ? weight2.data<S>() : nullptr;
  const S* b1 = bias.defined() ? bias.data<S>() : nullptr;
  const S* b2 = bias2.defined() ? bias2.data<S>() : nullptr;
  const S* res = residual.defined() ? residual.data<S>() : nullptr;
  S* o = out.data<S>();
#pragma omp parallel for if (N * K * M > (1 << 18))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      const A* hr = rows.data() + m * K;
      A v = 0, v2 = 0;
      for (int64_t k = 0; k < K; ++k) v += hr[k] * widen_value(w1[n * K + k]);
      if (b1) v += widen_value(b1[n]);
      if (w2) {
        for (int64_t k = 0; k < K; ++k) v2 += hr[k] * widen_value(w2[n * K + k]);
        if (b2) v2 += widen_value(b2[n]);
      }
      A result = v;
      switch (epilogue) {
        case LinearEpilogue::None:
          break;
        case LinearEpilogue::Gelu:
          result = gelu_tanh(v);
          break;
        case LinearEpilogue::Residual:
          result = stored<S>(v) + widen_value(res[m * N + n]);
          break;
        case LinearEpilogue::SwiGlu:
          result = silu(stored<S>(v)) * stored<S>(v2);
          break;
      }
      o[m * N + n] = narrow_value<S>(result);
    }
  }
}

void check_ids(const Tensor& ids, int64_t rows) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (p[i] < 0 || p[i] >= rows)
      throw InputError(
          fmt::format("token id {} at position {} is outside the embedding table of {} rows: the data "
                      "was made with a larger vocabulary than the model's",
                      p[i], i, rows));
  }
}

}  // namespace

void small_m_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight, const Tensor& bias,
                    const Tensor& weight2, const Tensor& bias2, const Tensor& residual, LinearEpilogue epilogue,
                    Tensor& out) {
  with_storage(x.dtype(), "small_m_linear", [&]<typename S>() {
    small_m_linear_typed<S>(x, norm, weight, bias, weight2, bias2, residual, epilogue, out);
  });
}

void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out) {
  const int64_t n = ids.numel(), cols = table.size(1);
  check_ids(ids, table.size(0));
  if (table2.defined()) check_ids(ids2, table2.size(0));
  with_storage(table.dtype(), "embedding_sum", [&]<typename S>() {
    with_storage(out.dtype(), "embedding_sum", [&]<typename O>() {
      // The sum in float32 (float64 when either side is f64), rounded once.
      using A = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<O, double>, double, float>;
      const int32_t* p = ids.data<int32_t>();
      const int32_t* p2 = table2.defined() ? ids2.data<int32_t>() : nullptr;
      for (int64_t i = 0; i < n; ++i) {
        const S* a = table.data<S>() + static_cast<int64_t>(p[i]) * cols;
        const S* b = p2 ? table2.data<S>() + static_cast<int64_t>(p2[i]) * cols : nullptr;
        O* dst = out.data<O>() + i * cols;
        for (int64_t c = 0; c < cols; ++c) {
          A v = static_cast<A>(widen_value(a[c]));
          if (b) v += static_cast<A>(widen_value(b[c]));
          if constexpr (std::is_same_v<O, BFloat16>)
            dst[c] = BFloat16(static_cast<float>(v));
          else
            dst[c] = static_cast<O>(v);
        }
      }
    });
  });
}

}  // namespace retort::kernels::cpu
