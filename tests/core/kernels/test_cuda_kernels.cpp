// The CUDA kernels' own contracts against the CPU kernels on the same (fresh, random, non-zero) inputs: odd
// shapes, misaligned views, f32 and bf16 storage. Outputs are filled with NaN before each call so that an element
// the kernel forgot to write fails the check. The CPU reference writes float32 results, so a bf16 GPU output is
// judged against the unrounded value. Skips cleanly on machines without a GPU.
//
// What an op of core/ops/ops.h computes through these kernels (its output and input gradients, GPU against CPU) is
// checked from the core op table (tests/core/ops/test_op_cases.cpp); this file keeps what the ops do not reach:
// fill and cast between every dtype, add's coefficients and aliasing, accumulating outputs (sum_rows' beta, the
// norms' and the embedding's gradients added into held values), sum_squares, gemm's alpha, beta and f32 output
// for bf16 operands, the per-row statistics and probabilities the ops keep to themselves, determinism, and the
// device-side id checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/backends.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "tests/core/relative_error.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda/cuda_context.h"
#endif

#ifdef RETORT_WITH_CUDA

namespace retort {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

std::vector<float> uniform(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Random values on the GPU (bf16 rounded when stored), never all zeros.
Tensor random_gpu(const Shape& shape, DType dtype, uint64_t seed, float lo = -2.f, float hi = 2.f) {
  return Tensor::from_floats(uniform(shape_numel(shape), seed, lo, hi), shape, dtype, kGpu);
}

// Rows [1, rows + 1) of a [rows + 1, cols] GPU tensor: its data starts `cols` elements into the buffer, so for
// most widths it is not 16-byte aligned.
Tensor offset_rows_gpu(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  return random_gpu({rows + 1, cols}, dtype, seed).rows(1, rows);
}

Tensor poisoned(const Shape& shape, DType dtype, Device device = kGpu) {
  return Tensor::from_floats(
      std::vector<float>(static_cast<size_t>(shape_numel(shape)), std::numeric_limits<float>::quiet_NaN()), shape,
      dtype, device);
}

Tensor host(const Tensor& t) {
  return t.to(kCpu);
}

using retort::testing::relative_error;

double tolerance(DType dtype) {
  return dtype == DType::F32 ? 1e-5 : 1e-2;
}

// Checks and logs one comparison; the log lines ("[cuda-err]") are collected for the GPU validation notes.
void expect_close(const std::string& what, const Tensor& out, const Tensor& ref, double tol) {
  const double err = relative_error(out, ref);
  std::printf("[cuda-err] %-60s %.3e (tol %.0e)\n", what.c_str(), err, tol);
  EXPECT_LE(err, tol) << what;
}

std::string name(DType dtype) {
  return std::string(dtype_name(dtype));
}

const DType kFloatTypes[] = {DType::F32, DType::BF16};

// ---- elementwise ------------------------------------------------------------------------------------------

TEST(CudaElementwise, FillEveryDtypeAndOffset) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::BF16, DType::I32}) {
    for (int64_t n : {1, 7, 37, 4097}) {
      Tensor base = Tensor::from_floats(uniform(n + 1, n, -1, 1), {n + 1}, dtype, kGpu);
      Tensor x = base.rows(1, n);
      gpu::fill(x, 3.0);
      const auto values = base.to_doubles();
      EXPECT_NE(values[0], 3.0) << "fill wrote before the view";
      for (int64_t i = 1; i <= n; ++i) ASSERT_EQ(values[i], 3.0) << name(dtype) << " n=" << n << " i=" << i;
    }
  }
}

TEST(CudaElementwise, CastBetweenDtypes) {
  SKIP_WITHOUT_GPU();
  const DType all[] = {DType::F32, DType::BF16, DType::I32};
  for (DType from : all) {
    for (DType to : all) {
      for (int64_t n : {5, 1023, 4099}) {
        Tensor x = Tensor::from_floats(uniform(n, 11 + n, -300, 300), {n}, from, kGpu);
        Tensor out = poisoned({n}, to);
        gpu::cast(x, out);
        Tensor ref = poisoned({n}, to, kCpu);
        cpu::cast(host(x), ref);
        EXPECT_EQ(relative_error(out, ref), 0.0) << name(from) << " -> " << name(to) << " n=" << n;
      }
    }
  }
}

// add's coefficients (the ops use 1 and +-1 only) and an output that aliases an operand.
TEST(CudaElementwise, AddWithCoefficientsAndInPlace) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 1000, 37 * 1023, 4097 * 3}) {
      for (bool offset : {false, true}) {
        const std::string tag = name(dtype) + " n=" + std::to_string(n) + (offset ? " offset" : "");
        Tensor a = offset ? offset_rows_gpu(n, 1, dtype, 1).view({n}) : random_gpu({n}, dtype, 1);
        Tensor b = offset ? offset_rows_gpu(n, 1, dtype, 2).view({n}) : random_gpu({n}, dtype, 2);
        Tensor ha = host(a), hb = host(b);
        const double tol = tolerance(dtype);
        {
          Tensor out = poisoned({n}, dtype), ref = poisoned({n}, DType::F32, kCpu);
          gpu::add(a, b, out, 0.75f, -1.25f);
          cpu::add(ha, hb, ref, 0.75f, -1.25f);
          expect_close("add " + tag, out, ref, tol);
        }
        {
          // In place: out aliases a.
          Tensor inplace = a.clone();
          Tensor ref = poisoned({n}, DType::F32, kCpu);
          gpu::add(inplace, b, inplace, 1.0f, 2.0f);
          cpu::add(ha, hb, ref, 1.0f, 2.0f);
          expect_close("add in place " + tag, inplace, ref, tol);
        }
      }
    }
  }
}

TEST(CudaElementwise, MixedDtypesConvertOnTheFly) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1029;
  Tensor a = random_gpu({n}, DType::BF16, 3), b = random_gpu({n}, DType::F32, 4);
  Tensor out = poisoned({n}, DType::F32), ref = poisoned({n}, DType::F32, kCpu);
  gpu::mul(a, b, out);
  cpu::mul(host(a), host(b), ref);
  expect_close("mul bf16 x f32 -> f32", out, ref, 1e-6);
}

// sum_rows into held values (beta 0.5); add_bias and sum_rows with beta 0 are the add_bias op's forward and
// backward, checked from the op table.
TEST(CudaElementwise, SumRowsAccumulates) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t rows : {1, 37, 5000}) {
      for (int64_t cols : {1, 7, 64, 1000, 1023, 4097}) {
        if (rows * cols > 5'000'000) continue;
        const std::string tag = name(dtype) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        Tensor x = offset_rows_gpu(rows, cols, dtype, rows + cols);
        Tensor out = random_gpu({cols}, dtype, 6);
        Tensor ref = host(out).to(DType::F32);
        gpu::sum_rows(x, out, 0.5f);
        cpu::sum_rows(host(x), ref, 0.5f);
        expect_close("sum_rows beta=0.5 " + tag, out, ref, tolerance(dtype));
      }
    }
  }
}

// ---- reductions ---------------------------------------------------------------------------------------------

// sum_squares (the gradient norm's; the sum is the sum op's, checked from the op table).
TEST(CudaReduce, SumSquares) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 1000, 4097, (1 << 20) + 3}) {
      for (bool offset : {false, true}) {
        Tensor x = offset ? offset_rows_gpu(n, 1, dtype, n).view({n}) : random_gpu({n}, dtype, n + 1);
        const std::string tag = name(dtype) + " n=" + std::to_string(n) + (offset ? " offset" : "");
        Tensor out = poisoned({1}, DType::F32), ref = poisoned({1}, DType::F32, kCpu);
        gpu::sum_squares(x, out);
        cpu::sum_squares(host(x), ref);
        // The GPU adds in double like the CPU: both round the same total once.
        expect_close("sum_squares " + tag, out, ref, 1e-6);
      }
    }
  }
}

// ---- gemm ---------------------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  int64_t a_batch, b_batch;  // 0: a 2-D operand shared by the batch
  int64_t batch;
};

Shape operand_shape(int64_t batch, int64_t rows, int64_t cols) {
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}

TEST(CudaGemm, AgainstCpuAllLayouts) {
  SKIP_WITHOUT_GPU();
  const GemmCase cases[] = {
      {37, 1023, 65, 0, 0, 0}, {1, 1, 1, 0, 0, 0},    {64, 4097, 96, 0, 0, 0}, {37, 129, 33, 3, 0, 3},
      {37, 129, 33, 0, 3, 3},  {65, 31, 17, 4, 4, 4}, {5, 1000, 1, 2, 2, 2},
  };
  struct Types {
    DType ab, c;
  };
  const Types types[] = {{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}};
  uint64_t seed = 100;
  for (const GemmCase& g : cases) {
    for (const Types& ty : types) {
      for (int trans = 0; trans < 4; ++trans) {
        for (float beta : {0.f, 0.7f}) {
          const bool ta = trans & 1, tb = trans & 2;
          Tensor a = random_gpu(ta ? operand_shape(g.a_batch, g.k, g.m) : operand_shape(g.a_batch, g.m, g.k), ty.ab,
                                ++seed, -1, 1);
          Tensor b = random_gpu(tb ? operand_shape(g.b_batch, g.n, g.k) : operand_shape(g.b_batch, g.k, g.n), ty.ab,
                                ++seed, -1, 1);
          const Shape c_shape = g.batch == 0 ? Shape{g.m, g.n} : Shape{g.batch, g.m, g.n};
          Tensor c = beta == 0.f ? poisoned(c_shape, ty.c) : random_gpu(c_shape, ty.c, ++seed);
          Tensor ref = beta == 0.f ? poisoned(c_shape, DType::F32, kCpu) : host(c).to(DType::F32);
          gpu::gemm(a, b, c, ta, tb, 1.5f, beta);
          cpu::gemm(host(a), host(b), ref, ta, tb, 1.5f, beta);
          const std::string tag = fmt::format("gemm {}->{} m{} n{} k{} ab{}/{} batch{} ta{} tb{} beta{}", name(ty.ab),
                                              name(ty.c), g.m, g.n, g.k, g.a_batch, g.b_batch, g.batch, ta, tb, beta);
          expect_close(tag, c, ref, tolerance(ty.c == DType::F32 && ty.ab == DType::F32 ? DType::F32 : DType::BF16));
        }
      }
    }
  }
}

// Large bf16 products with a dimension that is not a multiple of 8 run on zero-padded copies (gemm.cu,
// kPaddingMinMacs): 517 x 1001 x 1030 is above the threshold with every dimension odd-sized, so each layout pads A, B
// and C (C also with beta, whose old values must survive the copy in and out).
TEST(CudaGemm, LargeProductsWithOddSizesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 517, n = 1001, k = 1030;
  uint64_t seed = 900;
  for (DType c_dtype : {DType::BF16, DType::F32})
    for (int trans = 0; trans < 4; ++trans)
      for (float beta : {0.f, 0.5f}) {
        const bool ta = trans & 1, tb = trans & 2;
        Tensor a = random_gpu(ta ? Shape{k, m} : Shape{m, k}, DType::BF16, ++seed, -1, 1);
        Tensor b = random_gpu(tb ? Shape{n, k} : Shape{k, n}, DType::BF16, ++seed, -1, 1);
        Tensor c = beta == 0.f ? poisoned({m, n}, c_dtype) : random_gpu({m, n}, c_dtype, ++seed);
        Tensor ref = beta == 0.f ? poisoned({m, n}, DType::F32, kCpu) : host(c).to(DType::F32);
        gpu::gemm(a, b, c, ta, tb, 1.0f, beta);
        cpu::gemm(host(a), host(b), ref, ta, tb, 1.0f, beta);
        expect_close(fmt::format("padded gemm bf16->{} ta{} tb{} beta{}", name(c_dtype), ta, tb, beta), c, ref,
                     tolerance(DType::BF16));
      }
}

TEST(CudaGemm, EmptyInnerDimensionScalesC) {
  SKIP_WITHOUT_GPU();
  Tensor a = random_gpu({3, 0}, DType::F32, 1), b = random_gpu({0, 5}, DType::F32, 2);
  Tensor c = random_gpu({3, 5}, DType::F32, 3);
  Tensor ref = host(c);
  gpu::gemm(a, b, c, false, false, 1.f, 0.5f);
  cpu::scale(ref, 0.5f, ref);
  expect_close("gemm k=0", c, ref, 1e-7);
}

// ---- normalisation ------------------------------------------------------------------------------------------

struct NormCase {
  int64_t rows, cols;
};
const NormCase kNormCases[] = {{37, 1}, {37, 7}, {37, 64}, {37, 1000}, {37, 1023}, {37, 4097}, {300, 768}, {3, 30001}};

TEST(CudaNorm, LayerNormForwardBackward) {
  SKIP_WITHOUT_GPU();
  struct Types {
    DType x, w;
  };
  for (Types ty : {Types{DType::F32, DType::F32}, Types{DType::BF16, DType::BF16}, Types{DType::BF16, DType::F32}}) {
    for (const NormCase& nc : kNormCases) {
      for (bool with_bias : {true, false}) {
        const int64_t R = nc.rows, C = nc.cols;
        const std::string tag =
            fmt::format("x {} w {} {}x{}{}", name(ty.x), name(ty.w), R, C, with_bias ? "" : " no-bias");
        Tensor x = offset_rows_gpu(R, C, ty.x, R * C + 1);
        Tensor w = random_gpu({C}, ty.w, 2, 0.5f, 1.5f);
        Tensor b = with_bias ? random_gpu({C}, ty.w, 3) : Tensor();
        Tensor y = poisoned({R, C}, ty.x), mean = poisoned({R}, DType::F32), rstd = poisoned({R}, DType::F32);
        gpu::layer_norm_forward(x, w, b, 1e-5f, y, mean, rstd);
        Tensor ry = poisoned({R, C}, DType::F32, kCpu), rmean = poisoned({R}, DType::F32, kCpu),
               rrstd = poisoned({R}, DType::F32, kCpu);
        cpu::layer_norm_forward(host(x), host(w), with_bias ? host(b) : Tensor(), 1e-5f, ry, rmean, rrstd);
        const double tol = tolerance(ty.x == DType::F32 && ty.w == DType::F32 ? DType::F32 : DType::BF16);
        expect_close("layer_norm y " + tag, y, ry, tol);
        expect_close("layer_norm mean " + tag, mean, rmean, 1e-5);
        expect_close("layer_norm rstd " + tag, rstd, rrstd, 1e-5);

        // Backward from the CPU statistics, into gradients that already hold values (they accumulate).
        Tensor dy = random_gpu({R, C}, ty.x, 4);
        Tensor gmean = rmean.to(kGpu), grstd = rrstd.to(kGpu);
        Tensor dx = poisoned({R, C}, ty.x);
        Tensor dw = random_gpu({C}, ty.w, 5), db = with_bias ? random_gpu({C}, ty.w, 6) : Tensor();
        Tensor rdx = poisoned({R, C}, DType::F32, kCpu), rdw = host(dw).to(DType::F32);
        Tensor rdb = with_bias ? host(db).to(DType::F32) : Tensor();
        gpu::layer_norm_backward(dy, x, w, gmean, grstd, dx, dw, db);
        cpu::layer_norm_backward(host(dy), host(x), host(w), rmean, rrstd, rdx, rdw, rdb);
        expect_close("layer_norm dx " + tag, dx, rdx, tol);
        expect_close("layer_norm dweight " + tag, dw, rdw, tol);
        if (with_bias) expect_close("layer_norm dbias " + tag, db, rdb, tol);
      }
    }
  }
}

TEST(CudaNorm, RmsNormForwardBackward) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatTypes) {
    for (const NormCase& nc : kNormCases) {
      const int64_t R = nc.rows, C = nc.cols;
      const std::string tag = fmt::format("{} {}x{}", name(dtype), R, C);
      Tensor x = offset_rows_gpu(R, C, dtype, R * C + 7);
      Tensor w = random_gpu({C}, dtype, 2, 0.5f, 1.5f);
      Tensor y = poisoned({R, C}, dtype), rstd = poisoned({R}, DType::F32);
      gpu::rms_norm_forward(x, w, 1e-6f, y, rstd);
      Tensor ry = poisoned({R, C}, DType::F32, kCpu), rrstd = poisoned({R}, DType::F32, kCpu);
      cpu::rms_norm_forward(host(x), host(w), 1e-6f, ry, rrstd);
      expect_close("rms_norm y " + tag, y, ry, tolerance(dtype));
      expect_close("rms_norm rstd " + tag, rstd, rrstd, 1e-5);

      Tensor dy = random_gpu({R, C}, dtype, 4);
      Tensor dx = poisoned({R, C}, dtype), dw = random_gpu({C}, dtype, 5);
      Tensor rdx = poisoned({R, C}, DType::F32, kCpu), rdw = host(dw).to(DType::F32);
      gpu::rms_norm_backward(dy, x, w, rrstd.to(kGpu), dx, dw);
      cpu::rms_norm_backward(host(dy), host(x), host(w), rrstd, rdx, rdw);
      if (C == 1) {
        // One column: dx = rstd * g * (1 - xhat^2) with xhat^2 = x^2 / (x^2 + eps), a difference of nearly equal
        // numbers that float32 cannot resolve to 1e-5 of itself; judge it against the size of the terms.
        const std::vector<double> d = dx.to_doubles(), r = rdx.to_doubles(), dyv = dy.to_doubles(), wv = w.to_doubles(),
                                  sv = rrstd.to_doubles();
        double err = 0, terms = 0;
        for (int64_t i = 0; i < R; ++i) {
          err += (d[i] - r[i]) * (d[i] - r[i]);
          terms += std::pow(sv[i] * dyv[i] * wv[0], 2);
        }
        const double rel = std::sqrt(err / terms);
        std::printf("[cuda-err] %-60s %.3e (tol %.0e, relative to the cancelling terms)\n",
                    ("rms_norm dx " + tag).c_str(), rel, tolerance(dtype));
        EXPECT_LE(rel, tolerance(dtype));
      } else {
        expect_close("rms_norm dx " + tag, dx, rdx, tolerance(dtype));
      }
      expect_close("rms_norm dweight " + tag, dw, rdw, tolerance(dtype));
    }
  }
}

TEST(CudaNorm, BackwardIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const int64_t R = 4096, C = 768;
  Tensor x = random_gpu({R, C}, DType::F32, 1), w = random_gpu({C}, DType::F32, 2),
         dy = random_gpu({R, C}, DType::F32, 3);
  Tensor y = Tensor::empty({R, C}, DType::F32, kGpu), mean = Tensor::empty({R}, DType::F32, kGpu),
         rstd = Tensor::empty({R}, DType::F32, kGpu);
  gpu::layer_norm_forward(x, w, Tensor(), 1e-5f, y, mean, rstd);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dx = Tensor::empty({R, C}, DType::F32, kGpu), dw = Tensor::zeros({C}, DType::F32, kGpu),
           db = Tensor::zeros({C}, DType::F32, kGpu);
    gpu::layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);
    std::vector<float> got = dw.to_floats();
    const std::vector<float> more = db.to_floats();
    got.insert(got.end(), more.begin(), more.end());
    if (run == 0) {
      first = got;
    } else {
      ASSERT_EQ(got, first) << "run " << run << " differs bitwise";
    }
  }
}

// ---- attention -------------------------------------------------------------------------------------------------

TEST(CudaAttention, ForwardBackward) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t B, T, H, D;
  };
  for (DType dtype : kFloatTypes) {
    for (Case cs : {Case{2, 1, 2, 8}, Case{2, 65, 3, 16}, Case{1, 64, 2, 64}, Case{2, 33, 2, 7}, Case{1, 130, 4, 32}}) {
      const int64_t C = cs.H * cs.D;
      const int heads = static_cast<int>(cs.H);
      const std::string tag = fmt::format("{} B{} T{} H{} D{}", name(dtype), cs.B, cs.T, cs.H, cs.D);
      Tensor qkv = random_gpu({cs.B, cs.T, 3 * C}, dtype, cs.T * 10 + cs.D);
      Tensor out = poisoned({cs.B, cs.T, C}, dtype), probs = poisoned({cs.B, cs.H, cs.T, cs.T}, dtype);
      gpu::attention_forward(qkv, heads, out, probs);
      Tensor rout = poisoned({cs.B, cs.T, C}, DType::F32, kCpu);
      Tensor rprobs = poisoned({cs.B, cs.H, cs.T, cs.T}, DType::F32, kCpu);
      cpu::attention_forward(host(qkv), heads, rout, rprobs);
      expect_close("attention out " + tag, out, rout, tolerance(dtype));
      expect_close("attention probs " + tag, probs, rprobs, tolerance(dtype));

      Tensor p = rprobs.to(dtype).to(kGpu);
      Tensor dout = random_gpu({cs.B, cs.T, C}, dtype, 77);
      Tensor dqkv = poisoned({cs.B, cs.T, 3 * C}, dtype), rdqkv = poisoned({cs.B, cs.T, 3 * C}, DType::F32, kCpu);
      gpu::attention_backward(dout, qkv, p, heads, dqkv);
      cpu::attention_backward(host(dout), host(qkv), host(p), heads, rdqkv);
      expect_close("attention dqkv " + tag, dqkv, rdqkv, tolerance(dtype));
    }
  }
}

TEST(CudaAttention, Float32ProbsWithBf16Inputs) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 17, H = 2, D = 16, C = H * D;
  Tensor qkv = random_gpu({B, T, 3 * C}, DType::BF16, 9);
  Tensor out = poisoned({B, T, C}, DType::F32), probs = poisoned({B, H, T, T}, DType::F32);
  gpu::attention_forward(qkv, H, out, probs);
  Tensor rout = poisoned({B, T, C}, DType::F32, kCpu), rprobs = poisoned({B, H, T, T}, DType::F32, kCpu);
  cpu::attention_forward(host(qkv), H, rout, rprobs);
  expect_close("attention out bf16 qkv f32 probs", out, rout, 1e-2);
  expect_close("attention probs bf16 qkv f32 probs", probs, rprobs, 1e-2);
}

// ---- embedding -------------------------------------------------------------------------------------------------

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = dist(rng);
  // Repeats, which the backward pass must add up.
  for (int64_t i = 0; i + 3 < n; i += 4) ids[i + 1] = ids[i];
  return ids;
}

TEST(CudaEmbedding, ForwardBackward) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 1000, n = 37;
  // The whole table, and a vocab shard (rows 250..499 of 1000) that owns only some of the ids.
  for (auto [row_start, rows] : {std::pair<int64_t, int64_t>{0, vocab}, {250, 250}}) {
    for (DType dtype : kFloatTypes) {
      for (int64_t cols : {1, 7, 64, 768, 1023}) {
        const std::string tag =
            fmt::format("{} rows [{}, {}) of V{} C{} N{}", name(dtype), row_start, row_start + rows, vocab, cols, n);
        Tensor table = offset_rows_gpu(rows, cols, dtype, cols);
        Tensor ids = Tensor::from_ints(random_ids(n, vocab, cols), {n}, kGpu);
        Tensor out = poisoned({n, cols}, dtype), ref = poisoned({n, cols}, dtype, kCpu);
        gpu::embedding_forward(table, ids, row_start, vocab, out);
        cpu::embedding_forward(host(table), host(ids), row_start, vocab, ref);
        EXPECT_EQ(relative_error(out, ref), 0.0) << "embedding_forward " << tag;

        Tensor dout = random_gpu({n, cols}, dtype, 5);
        Tensor dtable = random_gpu({rows, cols}, dtype, 6);
        Tensor rdtable = host(dtable).to(DType::F32);
        gpu::embedding_backward(dout, ids, row_start, vocab, dtable);
        cpu::embedding_backward(host(dout), host(ids), row_start, vocab, rdtable);
        expect_close("embedding_backward " + tag, dtable, rdtable, tolerance(dtype));
      }
    }
  }
}

TEST(CudaEmbedding, BackwardIsDeterministicWithManyRepeats) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 50, cols = 96, n = 8192;
  std::vector<int32_t> idv(n);
  for (int64_t i = 0; i < n; ++i) idv[i] = static_cast<int32_t>((i * 7919) % vocab);
  Tensor ids = Tensor::from_ints(idv, {n}, kGpu);
  Tensor dout = random_gpu({n, cols}, DType::F32, 1);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor dtable = Tensor::zeros({vocab, cols}, DType::F32, kGpu);
    gpu::embedding_backward(dout, ids, 0, vocab, dtable);
    if (run == 0) {
      first = dtable.to_floats();
      Tensor ref = Tensor::zeros({vocab, cols}, DType::F32, kCpu);
      cpu::embedding_backward(host(dout), host(ids), 0, vocab, ref);
      expect_close("embedding_backward 8192 ids over 50 rows", dtable, ref, 1e-5);
    } else {
      ASSERT_EQ(dtable.to_floats(), first) << "run " << run << " differs bitwise";
    }
  }
}

TEST(CudaEmbedding, IdsOutOfRangeThrowWithoutCorruptingMemory) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 10, cols = 8;
  Tensor table = random_gpu({vocab, cols}, DType::F32, 1);
  Tensor bad = Tensor::from_ints({1, 10, 3, -1}, {4}, kGpu);
  Tensor out = poisoned({4, cols}, DType::F32);
  EXPECT_THROW(gpu::embedding_forward(table, bad, 0, vocab, out), InputError);
  const std::vector<float> got = out.to_floats();
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(got[1 * cols + c], 0.f) << "the bad row is written as zeros";
  Tensor dtable = Tensor::zeros({vocab, cols}, DType::F32, kGpu);
  EXPECT_THROW(gpu::embedding_backward(random_gpu({4, cols}, DType::F32, 2), bad, 0, vocab, dtable), InputError);
  // The error was reported once and cleared: a valid call afterwards succeeds.
  Tensor good = Tensor::from_ints({1, 9, 3, 0}, {4}, kGpu);
  EXPECT_NO_THROW(gpu::embedding_forward(table, good, 0, vocab, out));
  Tensor ref = poisoned({4, cols}, DType::F32, kCpu);
  cpu::embedding_forward(host(table), host(good), 0, vocab, ref);
  EXPECT_EQ(relative_error(out, ref), 0.0);
}

// ---- cross-entropy ----------------------------------------------------------------------------------------------

TEST(CudaCrossEntropy, ForwardBackward) {
  SKIP_WITHOUT_GPU();
  const int ignore = -100;
  for (DType dtype : kFloatTypes) {
    for (int64_t vocab : {7, 1000, 1023, 50257}) {
      const int64_t rows = 37;
      const std::string tag = fmt::format("{} N{} V{}", name(dtype), rows, vocab);
      Tensor logits = offset_rows_gpu(rows, vocab, dtype, vocab);
      std::vector<int32_t> tv = random_ids(rows, vocab, vocab + 1);
      tv[3] = ignore;
      tv[20] = ignore;
      Tensor targets = Tensor::from_ints(tv, {rows}, kGpu);
      Tensor loss = poisoned({rows}, DType::F32), lse = poisoned({rows}, DType::F32);
      gpu::cross_entropy_forward(logits, targets, ignore, loss, lse);
      Tensor rloss = poisoned({rows}, DType::F32, kCpu), rlse = poisoned({rows}, DType::F32, kCpu);
      cpu::cross_entropy_forward(host(logits), host(targets), ignore, rloss, rlse);
      // The logits are the same numbers on both sides: the loss is float32 math whatever the storage.
      expect_close("cross_entropy loss " + tag, loss, rloss, 1e-5);
      expect_close("cross_entropy lse " + tag, lse, rlse, 1e-5);

      const float scale = 1.f / 35.f;
      Tensor dlogits = poisoned({rows, vocab}, dtype), rd = poisoned({rows, vocab}, DType::F32, kCpu);
      gpu::cross_entropy_backward(logits, targets, rlse.to(kGpu), ignore, scale, dlogits);
      cpu::cross_entropy_backward(host(logits), host(targets), rlse, ignore, scale, rd);
      expect_close("cross_entropy dlogits " + tag, dlogits, rd, tolerance(dtype));
    }
  }
}

TEST(CudaCrossEntropy, TargetOutOfRangeThrows) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 3, vocab = 11;
  Tensor logits = random_gpu({rows, vocab}, DType::F32, 1);
  Tensor targets = Tensor::from_ints({0, 11, -100}, {rows}, kGpu);
  Tensor loss = poisoned({rows}, DType::F32), lse = poisoned({rows}, DType::F32);
  EXPECT_THROW(gpu::cross_entropy_forward(logits, targets, -100, loss, lse), InputError);
  Tensor dlogits = poisoned({rows, vocab}, DType::F32);
  EXPECT_THROW(gpu::cross_entropy_backward(logits, targets, lse, -100, 1.f, dlogits), InputError);
  Tensor good = Tensor::from_ints({0, 10, -100}, {rows}, kGpu);
  EXPECT_NO_THROW(gpu::cross_entropy_forward(logits, good, -100, loss, lse));
}

}  // namespace
}  // namespace retort

#else  // a build without the CUDA backend has no kernels::cuda to test

TEST(CudaKernels, NotBuilt) {
  GTEST_SKIP() << "this build has no CUDA backend";
}

#endif  // RETORT_WITH_CUDA
