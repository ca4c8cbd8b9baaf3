// GPT's decode step through all its blocks on the CPU, the reference of core/kernels/cuda/gpt_decode_layers.cu:
// plain loops in the kernel's order, rounding to the storage dtype where the GPU stores a value (the residual as the
// folded norms read it, q|k|v, the attention output, the MLP's hidden rows, the result) and keeping the residual
// itself in the accumulator type (float32 for f32 and bf16 storage, float64 for f64) from layer to layer.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu/decode_storage.h"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cpu {
namespace {
using namespace decode_storage;

template <typename S>
class DecodeLayers {
 public:
  using A = Acc<S>;
  DecodeLayers(const Tensor& x, int n_head, float eps)
      : B_(x.size(0)), C_(x.size(1)), H_(n_head), D_(C_ / n_head), eps_(eps), h_(static_cast<size_t>(B_ * C_)) {
    const S* xs = x.data<S>();
    for (int64_t i = 0; i < B_ * C_; ++i) h_[static_cast<size_t>(i)] = widen_value(xs[i]);
  }

  void block(const GptDecodeLayer& l, const int32_t* starts) {
    const std::vector<A> qkv = normed_linear(l.qkv, false);
    add(linear(attend(qkv, l, starts), l.proj_weight, l.proj_bias, false));
    add(linear(normed_linear(l.fc, true), l.out_weight, l.out_bias, false));
  }

  void write(Tensor& out) const {
    S* o = out.data<S>();
    for (int64_t i = 0; i < B_ * C_; ++i) o[i] = narrow_value<S>(h_[static_cast<size_t>(i)]);
  }

 private:
  // LN(h) W^T + b through the fold: the residual rows as stored times W', then each row's mean and 1/std of those
  // values applied with the column sums and the shift. GELU'd and rounded when `gelu`.
  std::vector<A> normed_linear(const NormedLinear& f, bool gelu) const {
    const int64_t N = f.weight.size(0);
    std::vector<A> rows(static_cast<size_t>(B_ * C_)), mean(static_cast<size_t>(B_)), rstd(static_cast<size_t>(B_));
    for (int64_t r = 0; r < B_; ++r) {
      A sum = 0, var = 0;
      for (int64_t c = 0; c < C_; ++c) {
        const size_t i = static_cast<size_t>(r * C_ + c);
        sum += rows[i] = stored<S>(h_[i]);
      }
      const A mu = sum / static_cast<A>(C_);
      for (int64_t c = 0; c < C_; ++c)
        var += (rows[static_cast<size_t>(r * C_ + c)] - mu) * (rows[static_cast<size_t>(r * C_ + c)] - mu);
      mean[static_cast<size_t>(r)] = mu;
      rstd[static_cast<size_t>(r)] = static_cast<A>(1) / std::sqrt(var / static_cast<A>(C_) + static_cast<A>(eps_));
    }
    const std::vector<A> products = linear(rows, f.weight, Tensor(), false);
    const A* colsum = f.colsum.data<A>();
    const A* shift = f.shift.data<A>();
    std::vector<A> out(products.size());
    for (int64_t r = 0; r < B_; ++r)
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(r * N + n);
        const A v = rstd[static_cast<size_t>(r)] * (products[i] - mean[static_cast<size_t>(r)] * colsum[n]) + shift[n];
        out[i] = gelu ? stored<S>(gelu_tanh(v)) : v;
      }
    return out;
  }

  // rows [B, K] x W^T (+ bias), GELU'd and rounded when `gelu`, rounded when stored (not the residual's outputs: the
  // caller adds those unrounded).
  std::vector<A> linear(const std::vector<A>& rows, const Tensor& w, const Tensor& bias, bool gelu) const {
    const int64_t N = w.size(0), K = w.size(1);
    const S* ws = w.data<S>();
    const S* bs = bias.defined() ? bias.data<S>() : nullptr;
    std::vector<A> out(static_cast<size_t>(B_ * N));
#pragma omp parallel for if (N * K * B_ > (1 << 18))
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < B_; ++r) {
        A v = bs ? widen_value(bs[n]) : A(0);
        for (int64_t k = 0; k < K; ++k) v += rows[static_cast<size_t>(r * K + k)] * widen_value(ws[n * K + k]);
        out[static_cast<size_t>(r * N + n)] = gelu ? stored<S>(gelu_tanh(v)) : v;
      }
    return out;
  }

  void add(const std::vector<A>& v) {
    for (size_t i = 0; i < h_.size(); ++i) h_[i] += v[i];
  }

  // Appends each row's new key and value at starts[b] (dropped at or past the cache's end) and attends over the row's
  // positions [0, min(starts[b] + 1, cap)); the output rounded as stored.
  std::vector<A> attend(const std::vector<A>& qkv_raw, const GptDecodeLayer& l, const int32_t* starts) const {
    const int64_t cap = l.k_cache.size(2);
    S* kc = l.k_cache.data<S>();
    S* vc = l.v_cache.data<S>();
    std::vector<A> qkv(qkv_raw.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = stored<S>(qkv_raw[i]);
    std::vector<A> out(static_cast<size_t>(B_ * C_));
    const A scale = static_cast<A>(1) / std::sqrt(static_cast<A>(D_));
    for (int64_t b = 0; b < B_; ++b) {
      const int64_t start = starts[b], seen = std::min<int64_t>(start + 1, cap);
      const A* row = qkv.data() + b * 3 * C_;
      for (int64_t h = 0; h < H_; ++h) {
        const int64_t head = (b * H_ + h) * cap * D_;
        const A* q = row + h * D_;
        const A* k_new = row + C_ + h * D_;
        const A* v_new = row + 2 * C_ + h * D_;
        if (start < cap)
          for (int64_t d = 0; d < D_; ++d) {
            kc[head + start * D_ + d] = narrow_value<S>(k_new[d]);
            vc[head + start * D_ + d] = narrow_value<S>(v_new[d]);
          }
        std::vector<A> scores(static_cast<size_t>(seen));
        A top = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < seen; ++j) {
          A dot = 0;
          for (int64_t d = 0; d < D_; ++d) dot += q[d] * widen_value(kc[head + j * D_ + d]);
          scores[static_cast<size_t>(j)] = dot * scale;
          top = std::max(top, dot * scale);
        }
        A total = 0;
        for (A& s : scores) total += (s = std::exp(s - top));
        for (int64_t d = 0; d < D_; ++d) {
          A sum = 0;
          for (int64_t j = 0; j < seen; ++j) sum += scores[static_cast<size_t>(j)] * widen_value(vc[head + j * D_ + d]);
          out[static_cast<size_t>(b * C_ + h * D_ + d)] = stored<S>(sum / total);
        }
      }
    }
    return out;
  }

  int64_t B_, C_, H_, D_;
  float eps_;
  std::vector<A> h_;
};

}  // namespace

void gpt_decode_layers(const Tensor& x, const std::vector<GptDecodeLayer>& layers, const Tensor& starts, int n_head,
                       float eps, Tensor& out) {
  with_storage(x.dtype(), "gpt_decode_layers", [&]<typename S>() {
    DecodeLayers<S> run(x, n_head, eps);
    for (const GptDecodeLayer& l : layers) run.block(l, starts.data<int32_t>());
    run.write(out);
  });
}

}  // namespace retort::kernels::cpu
