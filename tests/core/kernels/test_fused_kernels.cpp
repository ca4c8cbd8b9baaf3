// The fused kernels of the training step against their math written here in float64: the residual add + LayerNorm
// and + RMSNorm (forward: the stored sum and the normed output; backward: dx with the residual stream's gradient
// folded in, dweight, dbias accumulated), and a linear layer's forward with its bias (and GELU) epilogue and its
// weight gradient with the bias gradient. CPU in f64, f32 and bf16 storage; the GPU against the CPU on the same
// stored values (skipped without a GPU), at widths that take the GPU's vectorised and epilogue paths and widths
// that take its fallbacks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/tensor/device.h"
#include "tests/core/ops/decoder_ops_test_support.h"
#include "tests/core/relative_error.h"

namespace retort {
namespace {

using decoder_ops_testing::normal_values;
using decoder_ops_testing::scaled_error;
using decoder_ops_testing::stored;
using testing::relative_error;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// f64: rounding of float64 sums; f32: float32 sums of a few hundred terms; bf16: the result rounded to 8 bits
// (and, for the norms, the sum rounded before it is normed, which the reference reproduces).
double tolerance(DType dtype) {
  return dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 2e-5 : 1.5e-2;
}

// ---- residual add + norm, in float64 ----------------------------------------------------------------------------

struct NormReference {
  std::vector<double> sum, y, dx, dw, db;
};

// Over rows of `cols`: sum = x + r, y = norm(sum) w (+ b); dx = dsum + the norm's input gradient for dy.
// `sum_in` is the sum as stored (rounded to the storage dtype), which the norm and its gradient read.
NormReference norm_reference(bool rms, const std::vector<double>& sum_in, const std::vector<double>& w,
                             const std::vector<double>& b, const std::vector<double>& dy,
                             const std::vector<double>& dsum, int64_t rows, int64_t cols, double eps) {
  NormReference ref;
  ref.sum = sum_in;
  ref.y.resize(sum_in.size());
  ref.dx.resize(sum_in.size());
  ref.dw.assign(static_cast<size_t>(cols), 0.0);
  ref.db.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* s = sum_in.data() + r * cols;
    double mu = 0;
    if (!rms) {
      for (int64_t c = 0; c < cols; ++c) mu += s[c];
      mu /= static_cast<double>(cols);
    }
    double var = 0;
    for (int64_t c = 0; c < cols; ++c) var += (s[c] - mu) * (s[c] - mu);
    const double rs = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double xhat = (s[c] - mu) * rs;
      ref.y[i] = xhat * w[c] + (b.empty() ? 0.0 : b[c]);
      const double g = dy[i] * w[c];
      mean_g += g;
      mean_gx += g * xhat;
      ref.dw[c] += dy[i] * xhat;
      ref.db[c] += dy[i];
    }
    mean_g = rms ? 0.0 : mean_g / static_cast<double>(cols);
    mean_gx /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double xhat = (s[c] - mu) * rs;
      ref.dx[i] = rs * (dy[i] * w[c] - mean_g - xhat * mean_gx) + (dsum.empty() ? 0.0 : dsum[i]);
    }
  }
  return ref;
}

struct NormRun {
  Tensor sum, y, dx, dw, db;
};

// The fused kernels on stored inputs; dweight / dbias start at `prior` (they are accumulated into).
NormRun run_fused_norm(bool rms, const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, const Tensor& dy,
                       const Tensor& dsum, double prior, float eps) {
  const Device device = x.device();
  const DType stat = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t rows = x.size(0);
  NormRun out;
  out.sum = Tensor::full(x.shape(), 7.0, x.dtype(), device);  // poisoned: every element must be written
  out.y = Tensor::full(x.shape(), 7.0, x.dtype(), device);
  out.dx = Tensor::full(x.shape(), 7.0, x.dtype(), device);
  out.dw = Tensor::full(w.shape(), prior, w.dtype(), device);
  out.db = rms ? Tensor() : Tensor::full(w.shape(), prior, w.dtype(), device);
  Tensor mean = Tensor::empty({rows}, stat, device), rstd = Tensor::empty({rows}, stat, device);
  if (rms) {
    kernels::add_rms_norm_forward(x, r, w, eps, out.sum, out.y, rstd);
    kernels::add_rms_norm_backward(dy, dsum, out.sum, w, rstd, out.dx, out.dw);
  } else {
    kernels::add_layer_norm_forward(x, r, w, b, eps, out.sum, out.y, mean, rstd);
    kernels::add_layer_norm_backward(dy, dsum, out.sum, w, mean, rstd, out.dx, out.dw, out.db);
  }
  return out;
}

void check_norm_against_float64(bool rms, int64_t rows, int64_t cols, DType dtype, bool with_dsum) {
  SCOPED_TRACE(fmt::format("{} {}x{} {} dsum {}", rms ? "rms" : "layer", rows, cols, dtype_name(dtype), with_dsum));
  const Shape shape{rows, cols};
  const int64_t n = rows * cols;
  const float eps = 1e-5f;
  const Tensor x = stored(normal_values(n, 1, 2.0), shape, dtype), r = stored(normal_values(n, 2), shape, dtype);
  const Tensor w = stored(normal_values(cols, 3, 0.3), {cols}, dtype);
  const Tensor b = rms ? Tensor() : stored(normal_values(cols, 4), {cols}, dtype);
  const Tensor dy = stored(normal_values(n, 5), shape, dtype);
  const Tensor dsum = with_dsum ? stored(normal_values(n, 6), shape, dtype) : Tensor();
  const double prior = 0.5;
  const NormRun got = run_fused_norm(rms, x, r, w, b, dy, dsum, prior, eps);

  // The sum as the storage keeps it: x + r rounded once.
  const std::vector<double> xv = x.to_doubles(), rv = r.to_doubles();
  std::vector<double> exact_sum(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) exact_sum[i] = xv[i] + rv[i];
  const std::vector<double> stored_sum = stored(exact_sum, shape, dtype).to_doubles();
  EXPECT_EQ(got.sum.to_doubles(), stored_sum) << "the stream is x + r rounded once";

  const NormReference ref =
      norm_reference(rms, stored_sum, w.to_doubles(), rms ? std::vector<double>{} : b.to_doubles(), dy.to_doubles(),
                     with_dsum ? dsum.to_doubles() : std::vector<double>{}, rows, cols, eps);
  const double tol = tolerance(dtype);
  EXPECT_LT(scaled_error(got.y.to_doubles(), ref.y), tol) << "normed";
  EXPECT_LT(scaled_error(got.dx.to_doubles(), ref.dx), tol) << "dx";
  std::vector<double> dw = ref.dw, db = ref.db;
  for (double& v : dw) v += prior;
  for (double& v : db) v += prior;
  EXPECT_LT(scaled_error(got.dw.to_doubles(), dw), tol) << "dweight (accumulated)";
  if (!rms) {
    EXPECT_LT(scaled_error(got.db.to_doubles(), db), tol) << "dbias (accumulated)";
  }
}

TEST(FusedResidualNorm, LayerNormMatchesFloat64Math) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (bool with_dsum : {true, false}) check_norm_against_float64(false, 13, 37, dtype, with_dsum);
  check_norm_against_float64(false, 5, 768, DType::F32, true);
}

TEST(FusedResidualNorm, RmsNormMatchesFloat64Math) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (bool with_dsum : {true, false}) check_norm_against_float64(true, 13, 37, dtype, with_dsum);
  check_norm_against_float64(true, 5, 768, DType::F32, true);
}

TEST(FusedResidualNorm, MismatchedResidualIsAnError) {
  Tensor x = Tensor::zeros({2, 4}), r = Tensor::zeros({2, 3}), w = Tensor::full({4}, 1.0);
  Tensor sum = Tensor::empty({2, 4}), y = Tensor::empty({2, 4}), rstd = Tensor::empty({2});
  EXPECT_THROW(kernels::add_rms_norm_forward(x, r, w, 1e-6f, sum, y, rstd), Error);
  EXPECT_THROW(ops::add_layer_norm(x, r, w, Tensor()), Error);
}

TEST(FusedResidualNormCuda, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  // Widths: one column, odd (scalar path), 768 and 4096 (8-element packs), 30001 (wider than the block's loop).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{37, 1}, {37, 7}, {300, 768}, {9, 4096}, {3, 30001}};
  for (bool rms : {false, true})
    for (auto [rows, cols] : shapes)
      for (DType dtype : {DType::F32, DType::BF16})
        for (DType wtype : {dtype, DType::F32})
          for (bool with_dsum : {true, false}) {
            SCOPED_TRACE(fmt::format("{} {}x{} {} weights {} dsum {}", rms ? "rms" : "layer", rows, cols,
                                     dtype_name(dtype), dtype_name(wtype), with_dsum));
            const Shape shape{rows, cols};
            const int64_t n = rows * cols;
            std::vector<Tensor> in = {
                stored(normal_values(n, 11, 2.0), shape, dtype),     stored(normal_values(n, 12), shape, dtype),
                stored(normal_values(cols, 13, 0.3), {cols}, wtype), stored(normal_values(cols, 14), {cols}, wtype),
                stored(normal_values(n, 15), shape, dtype),          stored(normal_values(n, 16), shape, dtype)};
            NormRun side[2];
            for (int s = 0; s < 2; ++s) {
              const Device device = s == 0 ? Device::cpu() : Device::cuda(0);
              std::vector<Tensor> d;
              for (const Tensor& t : in) d.push_back(t.to(device));
              side[s] = run_fused_norm(rms, d[0], d[1], d[2], rms ? Tensor() : d[3], d[4], with_dsum ? d[5] : Tensor(),
                                       0.25, 1e-5f);
            }
            const double bound = dtype == DType::F32 && wtype == DType::F32 ? 2e-5 : 1e-2;
            EXPECT_EQ(side[1].sum.to(Device::cpu()).to_doubles(), side[0].sum.to_doubles()) << "sum";
            EXPECT_LT(relative_error(side[1].y.to(Device::cpu()), side[0].y), bound) << "normed";
            EXPECT_LT(relative_error(side[1].dx.to(Device::cpu()), side[0].dx), bound) << "dx";
            EXPECT_LT(relative_error(side[1].dw.to(Device::cpu()), side[0].dw), bound) << "dweight";
            if (!rms) {
              EXPECT_LT(relative_error(side[1].db.to(Device::cpu()), side[0].db), bound) << "dbias";
            }
          }
}

// ---- linear layer with epilogues, in float64 ----------------------------------------------------------------------

double gelu_tanh(double v) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
}

struct LinearRun {
  Tensor out, pre, dw, db;
  Tensor inference_out;  // linear_gelu_forward's (gelu only)
};

LinearRun run_linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, bool gelu) {
  const Device device = x.device();
  const int64_t M = x.size(0), N = w.size(0);
  LinearRun run;
  run.out = Tensor::full({M, N}, 7.0, x.dtype(), device);
  run.pre = gelu ? Tensor::full({M, N}, 7.0, x.dtype(), device) : Tensor();
  kernels::linear_forward(x, w, b, run.out, run.pre);
  if (gelu) {
    run.inference_out = Tensor::full({M, N}, 7.0, x.dtype(), device);
    kernels::linear_gelu_forward(x, w, b, run.inference_out);
  }
  run.dw = Tensor::full(w.shape(), 7.0, x.dtype(), device);
  run.db = b.defined() ? Tensor::full({N}, 7.0, x.dtype(), device) : Tensor();
  kernels::linear_weight_grad(dy, x, run.dw, run.db);
  return run;
}

TEST(FusedLinear, MatchesFloat64Math) {
  const int64_t M = 9, K = 13, N = 6;
  for (DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (bool gelu : {false, true})
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(fmt::format("{} gelu {} bias {}", dtype_name(dtype), gelu, with_bias));
        const Tensor x = stored(normal_values(M * K, 21), {M, K}, dtype);
        const Tensor w = stored(normal_values(N * K, 22, 0.5), {N, K}, dtype);
        const Tensor b = with_bias ? stored(normal_values(N, 23), {N}, dtype) : Tensor();
        const Tensor dy = stored(normal_values(M * N, 24), {M, N}, dtype);
        const LinearRun got = run_linear(x, w, b, dy, gelu);
        const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles(), dyv = dy.to_doubles();
        const std::vector<double> bv = with_bias ? b.to_doubles() : std::vector<double>(N, 0.0);
        std::vector<double> pre(M * N), out(M * N), dw(N * K, 0.0), db(N, 0.0);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = bv[j];
            for (int64_t k = 0; k < K; ++k) acc += xv[i * K + k] * wv[j * K + k];
            pre[i * N + j] = acc;
            out[i * N + j] = gelu ? gelu_tanh(acc) : acc;
            db[j] += dyv[i * N + j];
            for (int64_t k = 0; k < K; ++k) dw[j * K + k] += dyv[i * N + j] * xv[i * K + k];
          }
        const double tol = tolerance(dtype);
        EXPECT_LT(scaled_error(got.out.to_doubles(), out), tol) << "out";
        if (gelu) {
          EXPECT_LT(scaled_error(got.pre.to_doubles(), pre), tol) << "pre-activation";
          EXPECT_LT(scaled_error(got.inference_out.to_doubles(), out), tol) << "out without the pre-activation";
        }
        EXPECT_LT(scaled_error(got.dw.to_doubles(), dw), tol) << "dweight";
        if (with_bias) {
          EXPECT_LT(scaled_error(got.db.to_doubles(), db), tol) << "dbias";
        }
      }
}

TEST(FusedLinear, OpsTakeTheInferenceGeluWithoutGrad) {
  // ops::linear_gelu without a tape (no grad mode, or inputs that need none) computes through linear_gelu_forward:
  // the same values as the recorded op, and an output with no backward.
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor x = stored(normal_values(5 * 16, 41), {5, 16}, dtype),
           w = stored(normal_values(8 * 16, 42, 0.3), {8, 16}, dtype);
    const Tensor b = stored(normal_values(8, 43), {8}, dtype);
    w.set_requires_grad(true);
    const Tensor recorded = ops::linear_gelu(x, w, b);
    EXPECT_TRUE(recorded.requires_grad());
    NoGradGuard no_grad;
    const Tensor inference = ops::linear_gelu(x, w, b);
    EXPECT_FALSE(inference.requires_grad());
    EXPECT_EQ(inference.to_doubles(), recorded.to_doubles()) << dtype_name(dtype);
  }
}

TEST(FusedLinearCuda, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t M, K, N;
  };
  // Widths that are multiples of 8 take the epilogues; 65 (GELU's aux leading dimension) and 1 take fallbacks.
  const std::vector<Case> cases = {{37, 64, 128}, {256, 768, 3072}, {33, 64, 96}, {37, 1023, 65}, {5, 7, 1}};
  for (const Case& c : cases)
    for (DType dtype : {DType::F32, DType::BF16})
      for (bool gelu : {false, true}) {
        SCOPED_TRACE(fmt::format("{}x{}x{} {} gelu {}", c.M, c.K, c.N, dtype_name(dtype), gelu));
        const std::vector<Tensor> in = {stored(normal_values(c.M * c.K, 31), {c.M, c.K}, dtype),
                                        stored(normal_values(c.N * c.K, 32, 0.1), {c.N, c.K}, dtype),
                                        stored(normal_values(c.N, 33), {c.N}, dtype),
                                        stored(normal_values(c.M * c.N, 34), {c.M, c.N}, dtype)};
        LinearRun side[2];
        for (int s = 0; s < 2; ++s) {
          const Device device = s == 0 ? Device::cpu() : Device::cuda(0);
          side[s] = run_linear(in[0].to(device), in[1].to(device), in[2].to(device), in[3].to(device), gelu);
        }
        const double bound = dtype == DType::F32 ? 2e-5 : 1e-2;
        EXPECT_LT(relative_error(side[1].out.to(Device::cpu()), side[0].out), bound) << "out";
        if (gelu) {
          EXPECT_LT(relative_error(side[1].pre.to(Device::cpu()), side[0].pre), bound) << "pre-activation";
          EXPECT_LT(relative_error(side[1].inference_out.to(Device::cpu()), side[0].out), bound)
              << "out without the pre-activation";
        }
        EXPECT_LT(relative_error(side[1].dw.to(Device::cpu()), side[0].dw), bound) << "dweight";
        EXPECT_LT(relative_error(side[1].db.to(Device::cpu()), side[0].db), bound) << "dbias";
      }
}

}  // namespace
}  // namespace retort
