#pragma once
// Shared by the CPU and CUDA tests of the decoder ops of Llama / Qwen models (ops::swiglu, ops::rotary_embedding,
// ops::causal_attention, the separate-q/k/v ops::attention_with_kv_cache): random inputs, and each op's math
// written out here in float64, independently of the kernels.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace retort::decoder_ops_testing {

inline std::vector<double> normal_values(int64_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(gen);
  return v;
}

inline Tensor normal_tensor(const Shape& shape, uint32_t seed, DType dtype, Device device = Device::cpu(),
                            double scale = 1.0) {
  return Tensor::from_doubles(normal_values(shape_numel(shape), seed, scale), shape, DType::F64).to(dtype).to(device);
}

// silu(g) * u.
inline std::vector<double> swiglu_reference(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) out[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return out;
}

// The inverse frequencies of Llama 3's scaled rotary embedding (transformers' _compute_llama3_parameters), in
// float64 and then rounded to float32 as the model passes them: low frequencies divided by `factor`, high ones
// kept, a smooth blend between.
inline std::vector<float> llama3_inv_freq(int64_t head_dim, double theta, double factor, double low_freq_factor,
                                          double high_freq_factor, double original_context) {
  const double pi = 3.14159265358979323846;
  const double low_wavelen = original_context / low_freq_factor, high_wavelen = original_context / high_freq_factor;
  std::vector<float> out;
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    const double f = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(head_dim));
    const double wavelen = 2 * pi / f;
    double scaled = f;
    if (wavelen > low_wavelen) {
      scaled = f / factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      scaled = (1 - smooth) * f / factor + smooth * f;
    }
    out.push_back(static_cast<float>(scaled));
  }
  return out;
}

// Rotate-half rotary embedding of x [rows, width] (heads of head_dim) at per-row positions; the angle is the
// float32 product the op specifies, everything after it in float64.
inline std::vector<double> rotary_reference(const std::vector<double>& x, const std::vector<int32_t>& positions,
                                            const std::vector<float>& inv_freq, int64_t head_dim, int64_t width) {
  std::vector<double> out(x.size());
  const int64_t half = head_dim / 2;
  for (size_t r = 0; r < positions.size(); ++r) {
    for (int64_t h0 = 0; h0 < width; h0 += head_dim) {
      for (int64_t j = 0; j < half; ++j) {
        const float angle = static_cast<float>(positions[r]) * inv_freq[static_cast<size_t>(j)];
        const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
        const size_t i = r * static_cast<size_t>(width) + static_cast<size_t>(h0 + j);
        const double a = x[i], b = x[i + static_cast<size_t>(half)];
        out[i] = a * c - b * s;
        out[i + static_cast<size_t>(half)] = b * c + a * s;
      }
    }
  }
  return out;
}

// Causal attention with grouped-query heads, written out in float64: q [B, T, H * D], k and v [B, T, KV * D],
// query head h reading key/value head h / (H / KV). -> [B, T, H * D].
inline std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                               const std::vector<double>& v, int64_t B, int64_t T, int64_t H,
                                               int64_t KV, int64_t D) {
  std::vector<double> out(static_cast<size_t>(B * T * H * D), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> w(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KV);
      for (int64_t i = 0; i < T; ++i) {
        const double* qi = &q[static_cast<size_t>((b * T + i) * H * D + h * D)];
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const double* kj = &k[static_cast<size_t>((b * T + j) * KV * D + kvh * D)];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
          w[static_cast<size_t>(j)] = dot * scale;
          m = std::max(m, w[static_cast<size_t>(j)]);
        }
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) total += (w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - m));
        double* oi = &out[static_cast<size_t>((b * T + i) * H * D + h * D)];
        for (int64_t j = 0; j <= i; ++j) {
          const double* vj = &v[static_cast<size_t>((b * T + j) * KV * D + kvh * D)];
          for (int64_t d = 0; d < D; ++d) oi[d] += w[static_cast<size_t>(j)] / total * vj[d];
        }
      }
    }
  }
  return out;
}

// max |a - b| / max(max |b|, floor): the error of a result against its reference, relative to the reference's
// scale.
inline double scaled_max_error(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-3) {
  double err = 0, ref = floor;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    ref = std::max(ref, std::abs(b[i]));
  }
  return a.size() == b.size() ? err / ref : INFINITY;
}

// Generation over a key/value cache, the way a model runs it: q, k, v [B, T, ...] (on the device wanted) go
// through ops::attention_with_kv_cache in steps of `steps` new positions each (a prefill, then decodes; every row
// of the batch at the same positions), into zeroed caches [B, KV, capacity, D]. Returns the outputs of all steps
// as one [B, T, H * D] array, and the caches afterwards.
struct CachedRun {
  std::vector<double> out, k_cache, v_cache;
};

inline std::vector<double> columns(const std::vector<double>& x, int64_t rows, int64_t width, int64_t t0, int64_t t1,
                                   int64_t T) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t c = 0; c < width; ++c) out.push_back(x[static_cast<size_t>((r * T + t) * width + c)]);
  return out;
}

inline CachedRun run_cached(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, int64_t KV, int64_t cap,
                            const std::vector<int64_t>& steps) {
  const int64_t B = q.size(0), T = q.size(1), D = q.size(2) / H;
  const std::vector<double> qs = q.to_doubles(), ks = k.to_doubles(), vs = v.to_doubles();
  Tensor k_cache = Tensor::zeros({B, KV, cap, D}, q.dtype(), q.device());
  Tensor v_cache = Tensor::zeros({B, KV, cap, D}, q.dtype(), q.device());
  std::vector<double> out(static_cast<size_t>(B * T * H * D));
  NoGradGuard no_grad;
  int64_t t0 = 0;
  for (const int64_t n : steps) {
    auto part = [&](const std::vector<double>& x, int64_t width) {
      return Tensor::from_doubles(columns(x, B, width, t0, t0 + n, T), {B, n, width}, DType::F64)
          .to(q.dtype())
          .to(q.device());
    };
    const Tensor o = ops::attention_with_kv_cache(part(qs, H * D), part(ks, KV * D), part(vs, KV * D), k_cache, v_cache,
                                                  std::vector<int64_t>(static_cast<size_t>(B), t0), static_cast<int>(H),
                                                  static_cast<int>(KV));
    const std::vector<double> od = o.to_doubles();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < H * D; ++c)
          out[static_cast<size_t>((b * T + t0 + t) * H * D + c)] = od[static_cast<size_t>((b * n + t) * H * D + c)];
    t0 += n;
  }
  return {out, k_cache.to_doubles(), v_cache.to_doubles()};
}

// The value as storage of `dtype` keeps it (bf16 through float32, as a store from float32 rounds).
inline double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::F32:
      return static_cast<float>(v);
    case DType::BF16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

inline std::vector<double> rounded_all(DType dtype, std::vector<double> v) {
  for (double& x : v) x = round_to(dtype, x);
  return v;
}

// `v` stored as `dtype` on `device` (rounded once from float64).
inline Tensor stored(const std::vector<double>& v, const Shape& shape, DType dtype, Device device = Device::cpu()) {
  return Tensor::from_doubles(v, shape, DType::F64).to(dtype).to(device);
}

// Largest |got - ref| over the largest |ref|.
inline double scaled_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

}  // namespace retort::decoder_ops_testing
