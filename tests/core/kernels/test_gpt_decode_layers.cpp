// gpt_decode_layers (core/kernels/decode_kernels.h): GPT's blocks for one new position a row, against their math
// written here in float64. The reference rounds where the kernel is specified to round (the residual as the norms read
// it, the norm's weight folded into the product's, q|k|v, the attention output, the MLP's hidden rows, the result) and
// keeps the residual itself unrounded, so the comparison measures the order of the float32 sums alone.
// fold_norm_into_linear, which makes the kernel's folded products, is checked on its own against the same math. Rows
// start at different positions of their cache (0, the middle, the last position, and past the end: that row attends
// over the full cache and appends nothing); the appended keys and values are checked, and every other cache position is
// checked untouched.
//   CPU: f64 storage (to 1e-12), f32, and bf16 with the norm's weight in f32.
//   GPU (skipped without one): bf16 at 1, 5, 16, 17 and 32 rows (the two row tiles of the kernel), GPT-2 small's
//   width and heads, a model without biases, and 17 layers (two launches of at most 16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kernels/decode_kernels.h"
#include "core/tensor/device.h"
#include "core/tensor/dtype.h"
#include "tests/core/ops/decoder_ops_test_support.h"

namespace retort {
namespace {

using decoder_ops_testing::normal_values;
using decoder_ops_testing::round_to;
using decoder_ops_testing::rounded_all;
using decoder_ops_testing::scaled_error;
using decoder_ops_testing::stored;

struct Shape4 {
  int64_t B, C, H, cap, layers;
  bool bias = true;
  bool norm_f32 = false;
  std::string name() const {
    return "B " + std::to_string(B) + " C " + std::to_string(C) + " H " + std::to_string(H) + " cap " +
           std::to_string(cap) + " layers " + std::to_string(layers) + (bias ? "" : " no bias") +
           (norm_f32 ? " f32 norm" : "");
  }
};

// One layer's values as stored (float64), in the kernel's layout.
struct LayerValues {
  std::vector<double> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b, k, v;
};

struct Problem {
  std::vector<double> x;
  std::vector<int32_t> starts;
  std::vector<LayerValues> layers;
};

Problem make_problem(const Shape4& s, DType dtype, uint32_t seed) {
  const DType norm_dtype = s.norm_f32 ? DType::F32 : dtype;
  const int64_t C = s.C, D = C / s.H;
  Problem p;
  p.x = rounded_all(dtype, normal_values(s.B * C, seed++, 1.0));
  for (double& v : p.x) v = round_to(dtype, v + 0.5);  // an offset, so the norm's mean matters
  // Starts spread over the cache, with the first row at 0, the last at the cache's last position and (from 4 rows
  // on) one past the end.
  for (int64_t b = 0; b < s.B; ++b) p.starts.push_back(static_cast<int32_t>((b * 7 + 3) % s.cap));
  p.starts[0] = 0;
  if (s.B > 1) p.starts[static_cast<size_t>(s.B - 1)] = static_cast<int32_t>(s.cap - 1);
  if (s.B > 3) p.starts[2] = static_cast<int32_t>(s.cap + 2);
  const auto vec = [&](int64_t n, double scale, double offset, DType d) {
    std::vector<double> v = normal_values(n, seed++, scale);
    for (double& e : v) e += offset;
    return rounded_all(d, v);
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    LayerValues L;
    L.ln1_w = vec(C, 0.2, 1.0, norm_dtype);
    L.ln1_b = vec(C, 0.2, 0.0, norm_dtype);
    L.ln2_w = vec(C, 0.2, 1.0, norm_dtype);
    L.ln2_b = vec(C, 0.2, 0.0, norm_dtype);
    const double wc = 1.0 / std::sqrt(static_cast<double>(C)), w4 = 1.0 / std::sqrt(4.0 * C);
    L.qkv_w = vec(3 * C * C, wc, 0.0, dtype);
    L.proj_w = vec(C * C, wc, 0.0, dtype);
    L.fc_w = vec(4 * C * C, wc, 0.0, dtype);
    L.out_w = vec(4 * C * C, w4, 0.0, dtype);
    if (s.bias) {
      L.qkv_b = vec(3 * C, 0.1, 0.0, dtype);
      L.proj_b = vec(C, 0.1, 0.0, dtype);
      L.fc_b = vec(4 * C, 0.1, 0.0, dtype);
      L.out_b = vec(C, 0.1, 0.0, dtype);
    }
    L.k = vec(s.B * s.H * s.cap * D, 1.0, 0.0, dtype);
    L.v = vec(s.B * s.H * s.cap * D, 1.0, 0.0, dtype);
    p.layers.push_back(std::move(L));
  }
  return p;
}

// The blocks in float64; updates the caches in `layers` as the kernel must. -> the last residual rounded.
std::vector<double> reference(const Shape4& s, DType dtype, Problem& p) {
  const int64_t B = s.B, C = s.C, H = s.H, D = C / H, cap = s.cap;
  const auto r = [&](double v) { return round_to(dtype, v); };
  std::vector<double> h = p.x;
  // LN(h) W^T + bias over the residual as stored (rounded), with the norm's weight folded into W and rounded there:
  // sum_k round(W[n, k] gamma[k]) (h[k] - mean) rstd + bias[n] + sum_k W[n, k] beta[k]. Unrounded.
  const auto normed_linear = [&](const std::vector<double>& gamma, const std::vector<double>& beta,
                                 const std::vector<double>& w, const std::vector<double>& b, int64_t N) {
    std::vector<double> out(static_cast<size_t>(B * N));
    const std::vector<double> h_stored = rounded_all(dtype, h);
    for (int64_t i = 0; i < B; ++i) {
      const double* row = &h_stored[static_cast<size_t>(i * C)];
      double mean = 0, var = 0;
      for (int64_t c = 0; c < C; ++c) mean += row[c];
      mean /= static_cast<double>(C);
      for (int64_t c = 0; c < C; ++c) var += std::pow(row[c] - mean, 2);
      const double rstd = 1.0 / std::sqrt(var / static_cast<double>(C) + 1e-5);
      for (int64_t n = 0; n < N; ++n) {
        double v = b.empty() ? 0.0 : b[static_cast<size_t>(n)];
        for (int64_t k = 0; k < C; ++k) {
          const double wk = w[static_cast<size_t>(n * C + k)];
          v += r(wk * gamma[static_cast<size_t>(k)]) * (row[k] - mean) * rstd;
          if (!beta.empty()) v += wk * beta[static_cast<size_t>(k)];
        }
        out[static_cast<size_t>(i * N + n)] = v;
      }
    }
    return out;
  };
  // rows [B, K] W^T + bias -> [B, N], unrounded.
  const auto linear = [&](const std::vector<double>& rows, const std::vector<double>& w, const std::vector<double>& b,
                          int64_t N, int64_t K) {
    std::vector<double> out(static_cast<size_t>(B * N));
    for (int64_t i = 0; i < B; ++i)
      for (int64_t n = 0; n < N; ++n) {
        double v = b.empty() ? 0.0 : b[static_cast<size_t>(n)];
        for (int64_t k = 0; k < K; ++k) v += rows[static_cast<size_t>(i * K + k)] * w[static_cast<size_t>(n * K + k)];
        out[static_cast<size_t>(i * N + n)] = v;
      }
    return out;
  };
  for (LayerValues& L : p.layers) {
    std::vector<double> qkv = normed_linear(L.ln1_w, L.ln1_b, L.qkv_w, L.qkv_b, 3 * C);
    for (double& v : qkv) v = r(v);
    std::vector<double> attn(static_cast<size_t>(B * C));
    for (int64_t i = 0; i < B; ++i) {
      const int64_t start = p.starts[static_cast<size_t>(i)], seen = std::min(start + 1, cap);
      for (int64_t hd = 0; hd < H; ++hd) {
        const size_t head = static_cast<size_t>((i * H + hd) * cap * D);
        const double* q = &qkv[static_cast<size_t>(i * 3 * C + hd * D)];
        if (start < cap)
          for (int64_t d = 0; d < D; ++d) {
            L.k[head + static_cast<size_t>(start * D + d)] = q[C + d];
            L.v[head + static_cast<size_t>(start * D + d)] = q[2 * C + d];
          }
        std::vector<double> w(static_cast<size_t>(seen));
        double top = -INFINITY, total = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * L.k[head + static_cast<size_t>(j * D + d)];
          w[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          top = std::max(top, w[static_cast<size_t>(j)]);
        }
        for (double& e : w) total += (e = std::exp(e - top));
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0;
          for (int64_t j = 0; j < seen; ++j)
            sum += w[static_cast<size_t>(j)] * L.v[head + static_cast<size_t>(j * D + d)];
          attn[static_cast<size_t>(i * C + hd * D + d)] = r(sum / total);
        }
      }
    }
    const std::vector<double> proj = linear(attn, L.proj_w, L.proj_b, C, C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += proj[i];
    std::vector<double> hidden = normed_linear(L.ln2_w, L.ln2_b, L.fc_w, L.fc_b, 4 * C);
    for (double& v : hidden) v = r(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    const std::vector<double> out = linear(hidden, L.out_w, L.out_b, C, 4 * C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += out[i];
  }
  for (double& v : h) v = r(v);
  return h;
}

struct Errors {
  double out = 0, caches = 0;
};

Errors run_case(const Shape4& s, DType dtype, Device device, uint32_t seed) {
  Problem p = make_problem(s, dtype, seed);
  const DType norm_dtype = s.norm_f32 ? DType::F32 : dtype;
  const int64_t C = s.C, D = C / s.H;
  const Shape cache_shape{s.B, s.H, s.cap, D};
  std::vector<kernels::GptDecodeLayer> layers;
  const auto t = [&](const std::vector<double>& v, const Shape& shape, DType d) {
    return v.empty() ? Tensor() : stored(v, shape, d, device);
  };
  for (const LayerValues& L : p.layers)
    layers.push_back({kernels::fold_norm_into_linear(t(L.ln1_w, {C}, norm_dtype), t(L.ln1_b, {C}, norm_dtype),
                                                     t(L.qkv_w, {3 * C, C}, dtype), t(L.qkv_b, {3 * C}, dtype)),
                      t(L.proj_w, {C, C}, dtype), t(L.proj_b, {C}, dtype),
                      kernels::fold_norm_into_linear(t(L.ln2_w, {C}, norm_dtype), t(L.ln2_b, {C}, norm_dtype),
                                                     t(L.fc_w, {4 * C, C}, dtype), t(L.fc_b, {4 * C}, dtype)),
                      t(L.out_w, {C, 4 * C}, dtype), t(L.out_b, {C}, dtype), t(L.k, cache_shape, dtype),
                      t(L.v, cache_shape, dtype)});
  const Tensor x = stored(p.x, {s.B, C}, dtype, device);
  const Tensor starts = Tensor::from_ints(p.starts, {s.B}, device);
  Tensor out = Tensor::full({s.B, C}, std::nan(""), dtype, device);
  kernels::gpt_decode_layers(x, layers, starts, static_cast<int>(s.H), 1e-5f, out);
  const std::vector<double> want = reference(s, dtype, p);
  Errors e;
  const std::vector<double> got = out.to_doubles();
  for (double v : got) EXPECT_TRUE(std::isfinite(v)) << "an output was not written";
  e.out = scaled_error(got, want);
  for (size_t l = 0; l < layers.size(); ++l) {
    e.caches = std::max(e.caches, scaled_error(layers[l].k_cache.to_doubles(), p.layers[l].k));
    e.caches = std::max(e.caches, scaled_error(layers[l].v_cache.to_doubles(), p.layers[l].v));
  }
  return e;
}

double tolerance(DType dtype) {
  return dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 1e-5 : 2e-2;
}

// fold_norm_into_linear against its definition in float64: W' = round(W diag(gamma)), the sums of W' as stored, and
// bias + W beta; with and without the biases, the norm's weight in f32 under a bf16 weight.
void check_fold(Device device, DType dtype, DType norm_dtype, bool biases, uint32_t seed) {
  const int64_t N = 24, K = 272;
  const std::vector<double> gamma = rounded_all(norm_dtype, normal_values(K, seed, 0.5));
  const std::vector<double> beta = rounded_all(norm_dtype, normal_values(K, seed + 1, 0.5));
  const std::vector<double> w = rounded_all(dtype, normal_values(N * K, seed + 2, 1.0));
  const std::vector<double> b = rounded_all(dtype, normal_values(N, seed + 3, 1.0));
  const kernels::NormedLinear f = kernels::fold_norm_into_linear(
      stored(gamma, {K}, norm_dtype, device), biases ? stored(beta, {K}, norm_dtype, device) : Tensor(),
      stored(w, {N, K}, dtype, device), biases ? stored(b, {N}, dtype, device) : Tensor());
  ASSERT_EQ(f.colsum.dtype(), dtype == DType::F64 ? DType::F64 : DType::F32);
  const std::vector<double> folded = f.weight.to_doubles(), colsum = f.colsum.to_doubles(),
                            shift = f.shift.to_doubles();
  std::vector<double> want_w(static_cast<size_t>(N * K)), want_sum(static_cast<size_t>(N)),
      want_shift(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0, moved = biases ? b[static_cast<size_t>(n)] : 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const size_t i = static_cast<size_t>(n * K + k);
      sum += want_w[i] = round_to(dtype, w[i] * gamma[static_cast<size_t>(k)]);
      if (biases) moved += w[i] * beta[static_cast<size_t>(k)];
    }
    want_sum[static_cast<size_t>(n)] = sum;
    want_shift[static_cast<size_t>(n)] = moved;
  }
  // Each folded element is one rounding of an exact product: equal to the reference's; the sums differ only by the
  // order of float32 additions.
  EXPECT_EQ(folded, want_w);
  const double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
  EXPECT_LE(scaled_error(colsum, want_sum), tol);
  EXPECT_LE(scaled_error(shift, want_shift), tol);
}

TEST(GptDecodeLayers, FoldNormIntoLinearMatchesItsDefinition) {
  uint32_t seed = 300;
  for (bool biases : {true, false}) {
    SCOPED_TRACE(biases ? "biases" : "no biases");
    check_fold(Device::cpu(), DType::F64, DType::F64, biases, seed += 4);
    check_fold(Device::cpu(), DType::F32, DType::F32, biases, seed += 4);
    check_fold(Device::cpu(), DType::BF16, DType::F32, biases, seed += 4);
    if (!cuda_available()) continue;
    check_fold(Device::cuda(0), DType::BF16, DType::BF16, biases, seed += 4);
    check_fold(Device::cuda(0), DType::BF16, DType::F32, biases, seed += 4);
    check_fold(Device::cuda(0), DType::F32, DType::F32, biases, seed += 4);
  }
}

TEST(GptDecodeLayers, MatchesFloat64MathOnCpu) {
  uint32_t seed = 10;
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    for (Shape4 s : {Shape4{1, 32, 4, 6, 2}, Shape4{5, 64, 2, 9, 3}, Shape4{6, 48, 3, 5, 2, false}}) {
      s.norm_f32 = dtype == DType::BF16;
      SCOPED_TRACE(s.name() + " " + std::string(dtype_name(dtype)));
      const Errors e = run_case(s, dtype, Device::cpu(), seed++);
      EXPECT_LE(e.out, tolerance(dtype));
      // The appended key and value are q|k|v's values as stored: exact in every dtype.
      EXPECT_LE(e.caches, dtype == DType::F64 ? 1e-12 : tolerance(dtype));
    }
  }
}

TEST(GptDecodeLayers, MatchesFloat64MathOnGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 50;
  std::vector<Shape4> shapes;
  for (int64_t B : {1, 5, 16, 17, 32}) shapes.push_back({B, 256, 4, 40, 3});
  shapes.push_back({32, 768, 12, 150, 2});           // GPT-2 small's width and heads
  shapes.push_back({8, 256, 4, 33, 2, false});       // no biases
  shapes.push_back({7, 512, 8, 20, 2, true, true});  // the norm's weight in f32
  shapes.push_back({3, 256, 4, 12, 17});             // two launches
  for (const Shape4& s : shapes) {
    SCOPED_TRACE(s.name());
    ASSERT_TRUE(kernels::gpt_decode_layers_fits(s.B, s.C, s.H, DType::BF16, Device::cuda(0)));
    const Errors e = run_case(s, DType::BF16, Device::cuda(0), seed++);
    EXPECT_LE(e.out, tolerance(DType::BF16));
    EXPECT_LE(e.caches, 1e-2);
  }
}

// Inputs that do not fit the kernel's contract are refused with a message that names the tensor and the shape it
// needs, before anything runs (on the CPU, where the same checks guard the reference).
TEST(GptDecodeLayers, MismatchedInputsAreRefusedWithTheirShapes) {
  const Shape4 s{2, 32, 4, 6, 1};
  Problem p = make_problem(s, DType::F32, 3);
  const int64_t C = s.C, D = C / s.H;
  const auto t = [](const std::vector<double>& v, const Shape& shape) { return stored(v, shape, DType::F32); };
  const LayerValues& L = p.layers[0];
  const kernels::GptDecodeLayer good{
      kernels::fold_norm_into_linear(t(L.ln1_w, {C}), t(L.ln1_b, {C}), t(L.qkv_w, {3 * C, C}), t(L.qkv_b, {3 * C})),
      t(L.proj_w, {C, C}),
      t(L.proj_b, {C}),
      kernels::fold_norm_into_linear(t(L.ln2_w, {C}), t(L.ln2_b, {C}), t(L.fc_w, {4 * C, C}), t(L.fc_b, {4 * C})),
      t(L.out_w, {C, 4 * C}),
      t(L.out_b, {C}),
      t(L.k, {s.B, s.H, s.cap, D}),
      t(L.v, {s.B, s.H, s.cap, D})};
  const Tensor x = stored(p.x, {s.B, C}, DType::F32);
  const Tensor starts = Tensor::from_ints(p.starts, {s.B});
  const auto message = [&](const std::vector<kernels::GptDecodeLayer>& layers, const Tensor& st, int heads) {
    Tensor out = Tensor::empty({s.B, C});
    try {
      kernels::gpt_decode_layers(x, layers, st, heads, 1e-5f, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({good}, starts, static_cast<int>(s.H)), "no error");
  EXPECT_NE(message({}, starts, 4).find("no layers"), std::string::npos);
  EXPECT_NE(message({good}, starts, 5).find("multiple of the 5 heads"), std::string::npos);
  EXPECT_NE(message({good}, Tensor::from_ints({0, 1, 2}, {3}), 4).find("starts"), std::string::npos);
  kernels::GptDecodeLayer short_cache = good;
  short_cache.v_cache =
      t(std::vector<double>(static_cast<size_t>(s.B * s.H * (s.cap - 1) * D), 0.0), {s.B, s.H, s.cap - 1, D});
  EXPECT_NE(message({short_cache}, starts, 4).find("the caches"), std::string::npos);
  kernels::GptDecodeLayer narrow_mlp = good;
  narrow_mlp.fc.weight = t(std::vector<double>(static_cast<size_t>(3 * C * C), 0.0), {3 * C, C});
  EXPECT_NE(message({narrow_mlp}, starts, 4).find("the MLP weight"), std::string::npos);
  kernels::GptDecodeLayer unfolded = good;
  unfolded.qkv.colsum = Tensor();
  EXPECT_NE(message({unfolded}, starts, 4).find("fold its LayerNorm with fold_norm_into_linear"), std::string::npos);
}

TEST(GptDecodeLayers, ShapesTheGpuKernelDoesNotTakeAreRefused) {
  // On the CPU every floating shape fits (the reference); the GPU's kernel takes bf16, 1 to 32 rows, heads of 64 and
  // widths that are multiples of 256 up to 1024.
  EXPECT_TRUE(kernels::gpt_decode_layers_fits(40, 48, 3, DType::F32, Device::cpu()));
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(4, 48, 5, DType::F32, Device::cpu()));  // 48 / 5 heads
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  EXPECT_TRUE(kernels::gpt_decode_layers_fits(32, 768, 12, DType::BF16, gpu));
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(33, 768, 12, DType::BF16, gpu));
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(32, 768, 12, DType::F32, gpu));
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(32, 768, 6, DType::BF16, gpu));    // heads of 128
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(32, 320, 5, DType::BF16, gpu));    // not a multiple of 256
  EXPECT_FALSE(kernels::gpt_decode_layers_fits(32, 1280, 20, DType::BF16, gpu));  // wider than 1024
  EXPECT_THROW(
      {
        Tensor out = Tensor::empty({40, 256}, DType::BF16, gpu);
        kernels::gpt_decode_layers(Tensor::zeros({40, 256}).to(DType::BF16).to(gpu), {kernels::GptDecodeLayer{}},
                                   Tensor::from_ints(std::vector<int32_t>(40, 0), {40}, gpu), 4, 1e-5f, out);
      },
      Error);
}

}  // namespace
}  // namespace retort
