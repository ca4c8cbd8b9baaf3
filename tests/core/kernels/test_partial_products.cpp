// A product left as partial sums over slices of K and the residual update that adds them up with the norm after it
// (core/kernels/decode_kernels.h), against their math written here in float64:
//   linear_partials: each slice's product x[:, slice] W[:, slice]^T, for 1 to 4 slices, K with and without whole
//   16-byte packs per slice, rows from 1 to 40;
//   add_partials_norm: p = sum of the partials + bias rounded to x's dtype, sum = x + p rounded, then LayerNorm (with
//   and without its bias), RMSNorm or no norm of the stored sum; the norm's weight in f32 under bf16 rows; rows
//   whose width the GPU's one launch takes (16-byte packs, up to 8,192) and rows it does not (width 100, 8,200).
// The CPU in f64, f32 and bf16 storage; the GPU in f32 and bf16 against the same float64 math (skipped without a GPU).
#include <gtest/gtest.h>

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
using kernels::RowNorm;
using kernels::RowNormKind;

DType sums_of(DType dtype) {
  return dtype == DType::F64 ? DType::F64 : DType::F32;
}

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda(0));
  return d;
}

std::vector<DType> dtypes_on(const Device& device) {
  if (device.is_cuda()) return {DType::F32, DType::BF16};
  return {DType::F64, DType::F32, DType::BF16};
}

TEST(LinearPartials, EachSliceMatchesFloat64Math) {
  struct Case {
    int64_t M, K, N, S;
  };
  for (const Device& device : devices())
    for (const DType dtype : dtypes_on(device))
      for (const Case c :
           {Case{1, 64, 24, 1}, Case{32, 768, 96, 4}, Case{40, 96, 40, 3}, Case{7, 36, 10, 2}, Case{32, 3072, 64, 4}}) {
        SCOPED_TRACE(device.str() + " " + std::string(dtype_name(dtype)) + " M " + std::to_string(c.M) + " K " +
                     std::to_string(c.K) + " N " + std::to_string(c.N) + " S " + std::to_string(c.S));
        const std::vector<double> x = rounded_all(dtype, normal_values(c.M * c.K, 3)),
                                  w = rounded_all(dtype, normal_values(c.N * c.K, 4, 0.1));
        Tensor partials = Tensor::full({c.S, c.M, c.N}, 1e30, sums_of(dtype), device);  // every element written
        kernels::linear_partials(stored(x, {c.M, c.K}, dtype, device), stored(w, {c.N, c.K}, dtype, device), partials);
        const int64_t slice = c.K / c.S;
        std::vector<double> ref(static_cast<size_t>(c.S * c.M * c.N));
        for (int64_t s = 0; s < c.S; ++s)
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
              double acc = 0;
              for (int64_t k = s * slice; k < (s + 1) * slice; ++k) acc += x[m * c.K + k] * w[n * c.K + k];
              ref[(s * c.M + m) * c.N + n] = acc;
            }
        // Products of stored values summed in float32 (float64 for f64): only the order of the sums differs.
        EXPECT_LT(scaled_error(partials.to_doubles(), ref), dtype == DType::F64 ? 1e-12 : 2e-6);
      }
}

TEST(LinearPartials, RejectsSlicesThatDoNotDivideK) {
  Tensor partials = Tensor::zeros({3, 2, 4});
  try {
    kernels::linear_partials(Tensor::zeros({2, 10}), Tensor::zeros({4, 10}), partials);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("does not split into 3 equal slices"), std::string::npos) << e.what();
  }
}

struct NormCase {
  int64_t M, N, S;
  RowNormKind kind;
  bool norm_bias, norm_f32, bias;
};

std::string describe(const NormCase& c) {
  const char* kinds[] = {"none", "layernorm", "rmsnorm"};
  return "M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " S " + std::to_string(c.S) + " " +
         kinds[static_cast<int>(c.kind)] + (c.norm_bias ? "+bias" : "") + (c.norm_f32 ? " (f32)" : "") +
         (c.bias ? " bias" : "");
}

TEST(AddPartialsNorm, MatchesFloat64Math) {
  const std::vector<NormCase> cases{
      {32, 768, 4, RowNormKind::LayerNorm, true, false, true},
      {3, 64, 1, RowNormKind::LayerNorm, false, false, false},
      {17, 256, 2, RowNormKind::RmsNorm, false, true, true},
      {5, 768, 4, RowNormKind::None, false, false, true},
      {4, 100, 3, RowNormKind::LayerNorm, true, true, true},    // not in 16-byte packs
      {2, 8200, 2, RowNormKind::LayerNorm, true, false, true},  // wider than one launch
      {64, 8192, 4, RowNormKind::RmsNorm, false, false, false},
      {9, 512, 6, RowNormKind::LayerNorm, true, false, true}};  // more slices than a thread loads at once
  for (const Device& device : devices())
    for (const DType dtype : dtypes_on(device))
      for (const NormCase& c : cases) {
        if (c.norm_f32 && dtype != DType::BF16) continue;
        SCOPED_TRACE(device.str() + " " + std::string(dtype_name(dtype)) + " " + describe(c));
        const DType norm_dtype = c.norm_f32 ? DType::F32 : dtype, sums = sums_of(dtype);
        const std::vector<double> x = rounded_all(dtype, normal_values(c.M * c.N, 11)),
                                  parts = rounded_all(sums, normal_values(c.S * c.M * c.N, 12, 0.5)),
                                  bias = rounded_all(dtype, normal_values(c.N, 13, 0.2)),
                                  nw = rounded_all(norm_dtype, normal_values(c.N, 14, 0.3)),
                                  nb = rounded_all(norm_dtype, normal_values(c.N, 15, 0.1));
        RowNorm norm;
        norm.kind = c.kind;
        norm.eps = 1e-5f;
        std::vector<double> weight = nw;
        for (double& v : weight) v += 1.0;  // weights near 1, as trained norms have
        weight = rounded_all(norm_dtype, weight);
        if (c.kind != RowNormKind::None) norm.weight = stored(weight, {c.N}, norm_dtype, device);
        if (c.norm_bias) norm.bias = stored(nb, {c.N}, norm_dtype, device);
        const Tensor bias_t = c.bias ? stored(bias, {c.N}, dtype, device) : Tensor();
        Tensor sum = Tensor::full({c.M, c.N}, 1e30, dtype, device);
        Tensor y = c.kind == RowNormKind::None ? Tensor() : Tensor::full({c.M, c.N}, 1e30, dtype, device);
        kernels::add_partials_norm(stored(x, {c.M, c.N}, dtype, device), stored(parts, {c.S, c.M, c.N}, sums, device),
                                   bias_t, norm, sum, y);
        // float64: the product's output and the new stream rounded where the kernel stores them.
        std::vector<double> want_sum(x.size()), want_y(x.size());
        for (int64_t m = 0; m < c.M; ++m) {
          for (int64_t n = 0; n < c.N; ++n) {
            double p = c.bias ? bias[n] : 0.0;
            for (int64_t s = 0; s < c.S; ++s) p += parts[(s * c.M + m) * c.N + n];
            want_sum[m * c.N + n] = round_to(dtype, x[m * c.N + n] + round_to(dtype, p));
          }
          const double* row = want_sum.data() + m * c.N;
          double mu = 0, var = 0;
          if (c.kind == RowNormKind::LayerNorm) {
            for (int64_t n = 0; n < c.N; ++n) mu += row[n];
            mu /= static_cast<double>(c.N);
          }
          for (int64_t n = 0; n < c.N; ++n) var += (row[n] - mu) * (row[n] - mu);
          const double rs = 1.0 / std::sqrt(var / static_cast<double>(c.N) + 1e-5);
          for (int64_t n = 0; n < c.N; ++n)
            want_y[m * c.N + n] = (row[n] - mu) * rs * weight[n] + (c.norm_bias ? nb[n] : 0.0);
        }
        // The sum: the float32 sums' order may move a value across a rounding boundary of the storage (one unit in
        // the last place of values of order 1); the normed rows: that, and the float32 statistics.
        const double ulp = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F32 ? 1e-6 : 1e-13;
        const std::vector<double> got_sum = sum.to_doubles();
        for (size_t i = 0; i < got_sum.size(); ++i) {
          ASSERT_LE(std::abs(got_sum[i] - want_sum[i]), ulp * (std::abs(want_sum[i]) + 1.0))
              << "sum element " << i << " " << got_sum[i] << " vs " << want_sum[i];
        }
        if (c.kind != RowNormKind::None) {
          const double tolerance = dtype == DType::BF16 ? 1.5e-2 : dtype == DType::F32 ? 1e-5 : 1e-11;
          EXPECT_LT(scaled_error(y.to_doubles(), want_y), tolerance);
        }
      }
}

TEST(AddPartialsNorm, RejectsAMissingNormOutput) {
  RowNorm norm;
  norm.kind = RowNormKind::LayerNorm;
  norm.weight = Tensor::full({8}, 1.0);
  Tensor sum = Tensor::zeros({2, 8}), y;
  try {
    kernels::add_partials_norm(Tensor::zeros({2, 8}), Tensor::zeros({1, 2, 8}), Tensor(), norm, sum, y);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("with a norm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace retort
