// The decode kernels (core/kernels/decode_kernels.h) against their math written here in float64:
//   small_m_linear: epilogue(norm(x) W^T + bias) for 1..32 rows, with each prologue (none, LayerNorm with and
//   without bias, RMSNorm, the norm's weight in f32 under bf16 rows) and each epilogue (none, GELU, residual add,
//   SwiGLU), at widths that take the GPU's 16-byte packs, widths that do not (K not a multiple of 8), several warps
//   per output row (K 3072), several passes per row (K 8448), more tiles than blocks (N 5000), and more than 48 KiB
//   of shared memory (8 rows of 3072); past 4 bf16 rows the GPU's tensor-core kernel, with its rows whole in shared
//   memory and in chunks (32 rows of 4096), feature counts that are not a multiple of its 16, and rows it does not
//   take (K not a multiple of 32, f32) in launches of 8;
//   embedding_sum: the token row plus the position row, rounded once.
// The reference rounds where the kernels are specified to round (the normed row, a linear output before the residual
// add or SwiGLU, the result), so the comparison measures only the order of the float32 sums. CPU in f64, f32 and
// bf16 storage; the GPU in f32 and bf16 (skipped without a GPU). Every output element is checked to be written.
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
using kernels::LinearEpilogue;
using kernels::RowNormKind;

double tolerance(DType dtype) {
  return dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 5e-5 : 1.5e-2;
}

struct Case {
  int64_t M, K, N;
  RowNormKind norm = RowNormKind::None;
  bool norm_bias = false, norm_f32 = false, bias = true;
  LinearEpilogue epilogue = LinearEpilogue::None;
  std::string name() const {
    const char* norms[] = {"none", "layernorm", "rmsnorm"};
    const char* epilogues[] = {"none", "gelu", "residual", "swiglu"};
    return "M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N) + " norm " +
           norms[static_cast<int>(norm)] + (norm_bias ? "+bias" : "") + (norm_f32 ? " (f32)" : "") +
           (bias ? " bias" : "") + " epilogue " + epilogues[static_cast<int>(epilogue)];
  }
};

// Inputs stored in `dtype` (their values as stored, in float64) and the float64 result.
struct Problem {
  std::vector<double> x, w, w2, b, b2, nw, nb, res, ref;
};

Problem make_problem(const Case& c, DType dtype, uint32_t seed) {
  const DType norm_dtype = c.norm_f32 ? DType::F32 : dtype;
  const bool dual = c.epilogue == LinearEpilogue::SwiGlu;
  Problem p;
  // Rows with an offset and a spread, so the norm's mean and variance both matter.
  p.x = normal_values(c.M * c.K, seed, 1.5);
  for (double& v : p.x) v += 0.75;
  p.x = rounded_all(dtype, p.x);
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  p.w = rounded_all(dtype, normal_values(c.N * c.K, seed + 1, w_scale));
  if (dual) p.w2 = rounded_all(dtype, normal_values(c.N * c.K, seed + 2, w_scale));
  if (c.bias) p.b = rounded_all(dtype, normal_values(c.N, seed + 3, 0.5));
  if (c.bias && dual) p.b2 = rounded_all(dtype, normal_values(c.N, seed + 4, 0.5));
  if (c.norm != RowNormKind::None) {
    p.nw = normal_values(c.K, seed + 5, 0.3);
    for (double& v : p.nw) v += 1.0;
    p.nw = rounded_all(norm_dtype, p.nw);
    if (c.norm_bias) p.nb = rounded_all(norm_dtype, normal_values(c.K, seed + 6, 0.2));
  }
  if (c.epilogue == LinearEpilogue::Residual) p.res = rounded_all(dtype, normal_values(c.M * c.N, seed + 7, 2.0));

  // The rows the product reads.
  std::vector<double> h = p.x;
  if (c.norm != RowNormKind::None) {
    for (int64_t m = 0; m < c.M; ++m) {
      const double* xr = p.x.data() + m * c.K;
      double mu = 0;
      if (c.norm == RowNormKind::LayerNorm) {
        for (int64_t k = 0; k < c.K; ++k) mu += xr[k];
        mu /= static_cast<double>(c.K);
      }
      double q = 0;
      for (int64_t k = 0; k < c.K; ++k) q += (xr[k] - mu) * (xr[k] - mu);
      const double rs = 1.0 / std::sqrt(q / static_cast<double>(c.K) + 1e-5);
      for (int64_t k = 0; k < c.K; ++k)
        h[m * c.K + k] = round_to(dtype, (xr[k] - mu) * rs * p.nw[k] + (p.nb.empty() ? 0.0 : p.nb[k]));
    }
  }
  p.ref.resize(static_cast<size_t>(c.M * c.N));
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double v = p.b.empty() ? 0.0 : p.b[n], v2 = p.b2.empty() ? 0.0 : p.b2[n];
      for (int64_t k = 0; k < c.K; ++k) {
        v += h[m * c.K + k] * p.w[n * c.K + k];
        if (dual) v2 += h[m * c.K + k] * p.w2[n * c.K + k];
      }
      double r = v;
      switch (c.epilogue) {
        case LinearEpilogue::None:
          break;
        case LinearEpilogue::Gelu:
          r = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
          break;
        case LinearEpilogue::Residual:
          r = round_to(dtype, v) + p.res[m * c.N + n];
          break;
        case LinearEpilogue::SwiGlu: {
          const double g = round_to(dtype, v);
          r = g / (1.0 + std::exp(-g)) * round_to(dtype, v2);
          break;
        }
      }
      p.ref[static_cast<size_t>(m * c.N + n)] = r;
    }
  }
  return p;
}

// Runs the kernel on `device` in `dtype` and returns the scaled error against the reference.
double run_case(const Case& c, DType dtype, Device device, uint32_t seed) {
  const Problem p = make_problem(c, dtype, seed);
  const DType norm_dtype = c.norm_f32 ? DType::F32 : dtype;
  const auto opt = [&](const std::vector<double>& v, const Shape& shape, DType dt) {
    return v.empty() ? Tensor() : stored(v, shape, dt, device);
  };
  kernels::RowNorm norm;
  norm.kind = c.norm;
  norm.weight = opt(p.nw, {c.K}, norm_dtype);
  norm.bias = opt(p.nb, {c.K}, norm_dtype);
  norm.eps = 1e-5f;
  Tensor out = Tensor::full({c.M, c.N}, std::nan(""), dtype, device);  // poisoned: every element must be written
  kernels::small_m_linear(stored(p.x, {c.M, c.K}, dtype, device), norm, stored(p.w, {c.N, c.K}, dtype, device),
                          opt(p.b, {c.N}, dtype), opt(p.w2, {c.N, c.K}, dtype), opt(p.b2, {c.N}, dtype),
                          opt(p.res, {c.M, c.N}, dtype), c.epilogue, out);
  const std::vector<double> got = out.to_doubles();
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << "output " << i << " is " << got[i];
      return 1.0;
    }
  return scaled_error(got, p.ref);
}

// Every prologue and epilogue, at a packed width and an odd one, for rows 1..8 and a few counts up to 32.
std::vector<Case> coverage_cases() {
  std::vector<Case> cases;
  uint32_t turn = 0;
  for (int64_t K : {64, 37}) {
    for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 24, 32}) {
      Case c{M, K, 24 + M};
      c.norm = static_cast<RowNormKind>(turn % 3);
      c.norm_bias = c.norm == RowNormKind::LayerNorm && turn % 2 == 0;
      c.norm_f32 = turn % 4 == 1;
      c.bias = turn % 5 != 2;
      c.epilogue = static_cast<LinearEpilogue>(turn % 4);
      cases.push_back(c);
      ++turn;
    }
  }
  // Each epilogue with each norm once more at rows 3 (an odd row count inside the 4-row kernel).
  for (int e = 0; e < 4; ++e)
    for (int n = 0; n < 3; ++n) {
      Case c{3, 48, 40};
      c.norm = static_cast<RowNormKind>(n);
      c.norm_bias = n == 1;
      c.epilogue = static_cast<LinearEpilogue>(e);
      cases.push_back(c);
    }
  return cases;
}

TEST(SmallMLinear, MatchesFloat64MathOnCpu) {
  uint32_t seed = 100;
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    for (const Case& c : coverage_cases()) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
      if (c.norm_f32 && dtype == DType::F64) continue;  // the norm's weight is f64 or (under bf16 rows) f32
      EXPECT_LE(run_case(c, dtype, Device::cpu(), seed++), tolerance(dtype));
    }
  }
}

TEST(SmallMLinear, MatchesFloat64MathOnGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<Case> cases = coverage_cases();
  // The GPU's launch shapes: GPT-2's products at 1, 8, 13 and 32 rows (several warps per row at K 3072, more than
  // 48 KiB of shared memory at 8 x 3072), two passes per row (K 8448), and more tiles than the grid holds (N 5000).
  for (int64_t M : {1, 8, 13, 32}) {
    Case qkv{M, 768, 2304, RowNormKind::LayerNorm, true};
    Case proj{M, 768, 768};
    proj.epilogue = LinearEpilogue::Residual;
    Case fc{M, 768, 3072, RowNormKind::LayerNorm, true};
    fc.epilogue = LinearEpilogue::Gelu;
    Case down{M, 3072, 768};
    down.epilogue = LinearEpilogue::Residual;
    Case head{M, 768, 5000, RowNormKind::LayerNorm, true};
    head.bias = false;
    Case gate{M, 1024, 640, RowNormKind::RmsNorm};
    gate.norm_f32 = true;
    gate.bias = false;
    gate.epilogue = LinearEpilogue::SwiGlu;
    Case long_rows{M == 1 ? 1 : 2, 8448, 96, RowNormKind::RmsNorm};
    Case odd_long{M, 3001, 130, RowNormKind::LayerNorm, true};
    odd_long.epilogue = LinearEpilogue::Gelu;
    for (const Case& c : {qkv, proj, fc, down, head, gate, long_rows, odd_long}) cases.push_back(c);
  }
  // The tensor-core kernel's rows staged in chunks of K (32 rows of 4096 values, and SwiGLU's two weights at 3072),
  // and 16 features a group with a partial last group (N 130).
  Case chunked{32, 4096, 200, RowNormKind::LayerNorm, true};
  chunked.epilogue = LinearEpilogue::Gelu;
  Case chunked_dual{32, 3072, 96, RowNormKind::RmsNorm};
  chunked_dual.norm_f32 = true;
  chunked_dual.epilogue = LinearEpilogue::SwiGlu;
  Case ragged{20, 512, 130, RowNormKind::RmsNorm};
  ragged.epilogue = LinearEpilogue::Residual;
  for (const Case& c : {chunked, chunked_dual, ragged}) cases.push_back(c);
  // A Llama-3.2-1B MLP's down projection (K 8192) at 5, 7, 8 and 16 rows: bf16 on the tensor cores; f32 on the CUDA
  // cores in launches of as many rows as fit their shared memory (3 of 8192 floats: groups of 3, 3 and 1 at 7 rows).
  for (int64_t M : {5, 7, 8, 16}) {
    Case wide{M, 8192, 72};
    wide.epilogue = LinearEpilogue::Residual;
    cases.push_back(wide);
  }
  // One input row with every prologue and epilogue where a warp owns a weight row (the kernel that norms the row in
  // registers), at 1 and 3 packs a lane.
  for (int64_t K : {256, 768}) {
    for (int n = 0; n < 5; ++n) {
      for (int e = 0; e < 4; ++e) {
        Case c{1, K, 1200 + 8 * n};
        c.norm = n == 0 ? RowNormKind::None : n <= 2 ? RowNormKind::LayerNorm : RowNormKind::RmsNorm;
        c.norm_bias = n == 1;
        c.norm_f32 = n == 4;
        c.bias = (n + e) % 3 != 0;
        c.epilogue = static_cast<LinearEpilogue>(e);
        cases.push_back(c);
      }
    }
  }
  uint32_t seed = 500;
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
      if (!kernels::small_m_linear_fits(c.M, c.K, dtype)) continue;
      EXPECT_LE(run_case(c, dtype, Device::cuda(0), seed++), tolerance(dtype));
    }
  }
  // Programmatic dependent launch off gives the same bits (the switch only changes when a kernel may start), on the
  // CUDA cores and the tensor cores.
  for (int64_t M : {4, 32}) {
    const Case c{M, 768, 2304, RowNormKind::LayerNorm, true};
    const double with = run_case(c, DType::BF16, Device::cuda(0), 7);
    kernels::set_decode_dependent_launch_enabled(false);
    const double without = run_case(c, DType::BF16, Device::cuda(0), 7);
    kernels::set_decode_dependent_launch_enabled(true);
    EXPECT_EQ(with, without);
  }
}

TEST(SmallMLinear, RowsPastTheLimitAreNotTaken) {
  EXPECT_TRUE(kernels::small_m_linear_fits(8, 3072, DType::BF16));
  EXPECT_TRUE(kernels::small_m_linear_fits(32, 3072, DType::BF16));
  // One row of the widest input must fit the CUDA-core kernel's shared memory: 49,152 bf16 values, 24,576 floats.
  EXPECT_TRUE(kernels::small_m_linear_fits(16, 8192, DType::BF16));
  EXPECT_TRUE(kernels::small_m_linear_fits(32, 49152, DType::BF16));
  EXPECT_FALSE(kernels::small_m_linear_fits(1, 49153, DType::BF16));
  EXPECT_TRUE(kernels::small_m_linear_fits(8, 24576, DType::F32));
  EXPECT_FALSE(kernels::small_m_linear_fits(1, 24577, DType::F32));
  EXPECT_FALSE(kernels::small_m_linear_fits(33, 64, DType::BF16));
  EXPECT_FALSE(kernels::small_m_linear_fits(0, 64, DType::BF16));
  EXPECT_FALSE(kernels::small_m_linear_fits(8, 1 << 16, DType::BF16));
  Tensor out = Tensor::empty({33, 4});
  EXPECT_THROW(kernels::small_m_linear(Tensor::zeros({33, 8}), {}, Tensor::zeros({4, 8}), Tensor(), Tensor(), Tensor(),
                                       Tensor(), LinearEpilogue::None, out),
               Error);
  // A residual without the Residual epilogue, and SwiGlu without its second weight, are errors.
  Tensor out2 = Tensor::empty({2, 4});
  EXPECT_THROW(kernels::small_m_linear(Tensor::zeros({2, 8}), {}, Tensor::zeros({4, 8}), Tensor(), Tensor(), Tensor(),
                                       Tensor::zeros({2, 4}), LinearEpilogue::None, out2),
               Error);
  EXPECT_THROW(kernels::small_m_linear(Tensor::zeros({2, 8}), {}, Tensor::zeros({4, 8}), Tensor(), Tensor(), Tensor(),
                                       Tensor(), LinearEpilogue::SwiGlu, out2),
               Error);
}

// table[ids] + table2[ids2] in float64, rounded once to out's dtype.
void check_embedding_sum(Device device, DType table_dtype, DType out_dtype, bool two) {
  SCOPED_TRACE(std::string(device.str()) + " " + std::string(dtype_name(table_dtype)) + " -> " +
               std::string(dtype_name(out_dtype)) + (two ? " two tables" : " one table"));
  const int64_t rows = 50, rows2 = 20, C = 40, n = 6;
  const std::vector<double> a = rounded_all(table_dtype, normal_values(rows * C, 11));
  const std::vector<double> b = rounded_all(table_dtype, normal_values(rows2 * C, 12));
  const std::vector<int32_t> ids{3, 49, 0, 17, 3, 22}, ids2{0, 1, 19, 5, 5, 7};
  Tensor out = Tensor::full({n, C}, std::nan(""), out_dtype, device);
  kernels::embedding_sum(stored(a, {rows, C}, table_dtype, device), Tensor::from_ints(ids, {n}, device),
                         two ? stored(b, {rows2, C}, table_dtype, device) : Tensor(),
                         two ? Tensor::from_ints(ids2, {n}, device) : Tensor(), out);
  const std::vector<double> got = out.to_doubles();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const double sum = a[ids[i] * C + c] + (two ? b[ids2[i] * C + c] : 0.0);
      // float32 sums of two float32 values round once more than the float64 sum: compare after rounding both.
      EXPECT_EQ(got[i * C + c], round_to(out_dtype, static_cast<float>(sum))) << "row " << i << ", column " << c;
    }
  Tensor bad_out = Tensor::empty({1, C}, out_dtype, device);
  EXPECT_THROW(
      kernels::embedding_sum(stored(a, {rows, C}, table_dtype, device),
                             Tensor::from_ints({static_cast<int32_t>(rows)}, {1}, device), Tensor(), Tensor(), bad_out),
      InputError);
}

TEST(EmbeddingSum, IsTheRoundedSumOfTheRowsOnCpu) {
  for (bool two : {true, false}) {
    check_embedding_sum(Device::cpu(), DType::F32, DType::BF16, two);
    check_embedding_sum(Device::cpu(), DType::F32, DType::F32, two);
  }
}

TEST(EmbeddingSum, IsTheRoundedSumOfTheRowsOnGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (bool two : {true, false}) {
    check_embedding_sum(Device::cuda(0), DType::F32, DType::BF16, two);
    check_embedding_sum(Device::cuda(0), DType::F32, DType::F32, two);
    check_embedding_sum(Device::cuda(0), DType::BF16, DType::BF16, two);
  }
}

}  // namespace
}  // namespace retort
