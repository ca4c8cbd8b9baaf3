// The fused causal attention (kernels::flash_attention_*, CUDA bf16) against causal attention written out here in
// float64 on the same bf16-rounded inputs: the output, the saved row log-sum-exps and dq, dk, dv; against the
// materialising kernels; and through ops::causal_attention / causal_self_attention with RETORT_ATTENTION switching
// paths. Shapes cover both head sizes, grouped-query ratios 1, 4 and 8, lengths that are not a multiple of the
// kernels' tiles (32 to 128 rows: T = 1, 100, 192, 1000), a long sequence (4096), 32 heads at batch 1, the packed
// [B, T, 3C] layout, and scores of magnitude 1e4; and the wgmma kernels (H100 / H200) against the mma.sync ones.
// The GPU tests skip cleanly without a GPU; RETORT_FLASH_FORWARD=mma, RETORT_FLASH_BACKWARD=mma,
// RETORT_FLASH_FORWARD_KEYS, RETORT_FLASH_BACKWARD_KEYS, RETORT_FLASH_FORWARD_SCHEDULE, RETORT_FLASH_BACKWARD_SCHEDULE,
// RETORT_FLASH_BACKWARD_WALK, RETORT_FLASH_GRID, RETORT_FLASH_FORWARD_PERSISTENT, RETORT_FLASH_ROWS and
// RETORT_FLASH_KEYS in the environment run them on the other kernels (gpu-checks/flash.sh does).
//
// Tolerances (norm-wise relative error, ||x - ref|| / ||ref||): the kernels round P and dS to bf16 (8 significant
// bits, relative rounding error <= 2^-9 ~ 2e-3) before their products and write out, dq, dk, dv in bf16 (another
// <= 2e-3 each); everything else accumulates in float32. Independent roundings over many terms average out, so
// the norm-wise error is a few 1e-3: 1e-2 for the output and dv, 2e-2 for dq and dk (dS = P (dP - Dvec) loses
// digits to the subtraction). lse is float32 with its scores from exact bf16 products summed in float32:
// 1e-5 relative to the tensor's largest |lse| plus 1e-5 absolute.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/kernels/backends.h"
#include "core/kernels/kernels.h"
#include "core/ops/ops.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace retort {
namespace {

// CPU tensors (and every tensor of a build without CUDA) keep the materialising kernels: the fused ones say no and,
// called anyway, refuse with the way out.
TEST(FlashAttention, CpuTensorsTakeTheMaterialisingPath) {
  const Tensor q = Tensor::zeros({1, 4, 128}, DType::BF16);
  EXPECT_FALSE(kernels::flash_attention_applies(q, q, q, 64));
  Tensor out = Tensor::zeros({1, 4, 128}, DType::BF16), lse = Tensor::zeros({1, 2, 4}, DType::F32);
  try {
    kernels::flash_attention_forward(q, q, q, 2, 2, out, lse);
    ADD_FAILURE() << "flash_attention_forward took CPU tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace retort

#ifdef RETORT_WITH_CUDA

namespace retort {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

// Batch, positions, query heads, key/value heads, head size.
struct Dims {
  int64_t B, T, H, KV, D;
  std::string str() const { return fmt::format("B{} T{} H{} KV{} D{}", B, T, H, KV, D); }
};

// q [B, T, H D], k and v [B, T, KV D], do [B, T, H D] as float64 copies of bf16 values.
struct Inputs {
  std::vector<double> q, k, v, dout;
};

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

// Normal values times `scale`, rounded through bf16 so that the float64 reference sees the kernel's inputs.
std::vector<double> bf16_values(int64_t n, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(scale) * normal(rng);
  return Tensor::from_floats(v, {n}, DType::BF16).to_doubles();
}

Inputs random_inputs(const Dims& d, uint64_t seed, double qk_scale = 1.0) {
  return {bf16_values(d.B * d.T * d.H * d.D, seed, qk_scale), bf16_values(d.B * d.T * d.KV * d.D, seed + 1, qk_scale),
          bf16_values(d.B * d.T * d.KV * d.D, seed + 2, 1.0), bf16_values(d.B * d.T * d.H * d.D, seed + 3, 1.0)};
}

// Causal attention and its gradients in float64, one thread per (b, h) slice of the heads.
Result reference(const Dims& d, const Inputs& in) {
  const int64_t g = d.H / d.KV, qw = d.H * d.D, kw = d.KV * d.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.D));
  Result r;
  r.out.assign(in.q.size(), 0.0);
  r.dq.assign(in.q.size(), 0.0);
  r.lse.assign(static_cast<size_t>(d.B * d.H * d.T), 0.0);
  // dk, dv per query head first (no races), summed over the group at the end.
  std::vector<double> dk_h(static_cast<size_t>(d.B * d.T * qw), 0.0), dv_h(dk_h.size(), 0.0);
  auto slice = [&](int64_t b, int64_t h) {
    const int64_t j_head = h / g;
    auto Q = [&](int64_t t, int64_t x) { return in.q[(b * d.T + t) * qw + h * d.D + x]; };
    auto K = [&](int64_t t, int64_t x) { return in.k[(b * d.T + t) * kw + j_head * d.D + x]; };
    auto V = [&](int64_t t, int64_t x) { return in.v[(b * d.T + t) * kw + j_head * d.D + x]; };
    auto DO = [&](int64_t t, int64_t x) { return in.dout[(b * d.T + t) * qw + h * d.D + x]; };
    std::vector<double> p(static_cast<size_t>(d.T)), dp(static_cast<size_t>(d.T));
    for (int64_t t = 0; t < d.T; ++t) {
      double mx = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double s = 0;
        for (int64_t x = 0; x < d.D; ++x) s += Q(t, x) * K(j, x);
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j <= t; ++j) p[j] /= sum;
      r.lse[(b * d.H + h) * d.T + t] = mx + std::log(sum);
      double* o = &r.out[(b * d.T + t) * qw + h * d.D];
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t x = 0; x < d.D; ++x) o[x] += p[j] * V(j, x);
      // dP = dO V^T, dS = P (dP - sum_j P dP), dq = scale dS K, dk_j += scale dS_j q, dv_j += P_j dO.
      double dot = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double s = 0;
        for (int64_t x = 0; x < d.D; ++x) s += DO(t, x) * V(j, x);
        dp[j] = s;
        dot += p[j] * s;
      }
      double* dq = &r.dq[(b * d.T + t) * qw + h * d.D];
      for (int64_t j = 0; j <= t; ++j) {
        const double ds = p[j] * (dp[j] - dot) * scale;
        double* dk = &dk_h[(b * d.T + j) * qw + h * d.D];
        double* dv = &dv_h[(b * d.T + j) * qw + h * d.D];
        for (int64_t x = 0; x < d.D; ++x) {
          dq[x] += ds * K(j, x);
          dk[x] += ds * Q(t, x);
          dv[x] += p[j] * DO(t, x);
        }
      }
    }
  };
  std::vector<std::thread> workers;
  const int64_t slices = d.B * d.H;
  const int64_t n_threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  for (int64_t w = 0; w < n_threads; ++w)
    workers.emplace_back([&, w] {
      for (int64_t s = w; s < slices; s += n_threads) slice(s / d.H, s % d.H);
    });
  for (auto& w : workers) w.join();
  r.dk.assign(in.k.size(), 0.0);
  r.dv.assign(in.v.size(), 0.0);
  for (int64_t bt = 0; bt < d.B * d.T; ++bt)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t x = 0; x < d.D; ++x) {
        r.dk[bt * kw + (h / g) * d.D + x] += dk_h[bt * qw + h * d.D + x];
        r.dv[bt * kw + (h / g) * d.D + x] += dv_h[bt * qw + h * d.D + x];
      }
  return r;
}

double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// lse within 1e-5 of the largest |lse| of the tensor plus 1e-5 (see the top of the file).
void expect_lse_close(const std::vector<double>& lse, const std::vector<double>& ref, const std::string& tag) {
  ASSERT_EQ(lse.size(), ref.size()) << tag;
  double largest = 0, worst = 0;
  for (double x : ref) largest = std::max(largest, std::abs(x));
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(lse[i] - ref[i]));
  EXPECT_LE(worst, 1e-5 * largest + 1e-5) << "lse " << tag;
}

Tensor gpu_bf16(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_doubles(v, shape).to(DType::BF16).to(kGpu);
}

Tensor nan_gpu(const Shape& shape, DType dtype) {
  return Tensor::full(shape, std::nan(""), dtype, kGpu);
}

// Columns [c0, c0 + w) of each row of a [rows, width] matrix.
std::vector<double> columns(const std::vector<double>& m, int64_t width, int64_t c0, int64_t w) {
  std::vector<double> out;
  for (size_t r = 0; r < m.size() / width; ++r)
    out.insert(out.end(), m.begin() + static_cast<int64_t>(r) * width + c0,
               m.begin() + static_cast<int64_t>(r) * width + c0 + w);
  return out;
}

// The fused kernels on split q, k, v (or the packed [B, T, 3C] layout when `packed`, which needs KV = H).
Result run_flash(const Dims& d, const Inputs& in, bool packed) {
  const int H = static_cast<int>(d.H), KV = static_cast<int>(d.KV);
  const int64_t C = d.H * d.D, KC = d.KV * d.D;
  Tensor out = nan_gpu({d.B, d.T, C}, DType::BF16), lse = nan_gpu({d.B, d.H, d.T}, DType::F32);
  Tensor dout = gpu_bf16(in.dout, {d.B, d.T, C});
  Result r;
  if (packed) {
    std::vector<double> qkv;
    for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
      qkv.insert(qkv.end(), in.q.begin() + bt * C, in.q.begin() + (bt + 1) * C);
      qkv.insert(qkv.end(), in.k.begin() + bt * C, in.k.begin() + (bt + 1) * C);
      qkv.insert(qkv.end(), in.v.begin() + bt * C, in.v.begin() + (bt + 1) * C);
    }
    Tensor t = gpu_bf16(qkv, {d.B, d.T, 3 * C});
    EXPECT_TRUE(kernels::flash_attention_applies(t, t, t, d.D));
    kernels::flash_attention_forward(t, H, out, lse);
    Tensor dqkv = nan_gpu({d.B, d.T, 3 * C}, DType::BF16);
    kernels::flash_attention_backward(dout, t, out, lse, H, dqkv);
    const std::vector<double> g = dqkv.to_doubles();
    r.dq = columns(g, 3 * C, 0, C);
    r.dk = columns(g, 3 * C, C, C);
    r.dv = columns(g, 3 * C, 2 * C, C);
  } else {
    Tensor q = gpu_bf16(in.q, {d.B, d.T, C}), k = gpu_bf16(in.k, {d.B, d.T, KC}), v = gpu_bf16(in.v, {d.B, d.T, KC});
    EXPECT_TRUE(kernels::flash_attention_applies(q, k, v, d.D));
    kernels::flash_attention_forward(q, k, v, H, KV, out, lse);
    Tensor dq = nan_gpu(q.shape(), DType::BF16), dk = nan_gpu(k.shape(), DType::BF16);
    Tensor dv = nan_gpu(v.shape(), DType::BF16);
    kernels::flash_attention_backward(dout, q, k, v, out, lse, H, KV, dq, dk, dv);
    r.dq = dq.to_doubles();
    r.dk = dk.to_doubles();
    r.dv = dv.to_doubles();
  }
  r.out = out.to_doubles();
  r.lse = lse.to_doubles();
  return r;
}

void expect_matches_reference(const Dims& d, const Inputs& in, bool packed, bool check_dq_dk = true) {
  const std::string tag = d.str() + (packed ? " packed" : "");
  const Result ref = reference(d, in);
  const Result got = run_flash(d, in, packed);
  EXPECT_LE(relative_error(got.out, ref.out), 1e-2) << "out " << tag;
  expect_lse_close(got.lse, ref.lse, tag);
  EXPECT_LE(relative_error(got.dv, ref.dv), 1e-2) << "dv " << tag;
  if (check_dq_dk) {
    EXPECT_LE(relative_error(got.dq, ref.dq), 2e-2) << "dq " << tag;
    EXPECT_LE(relative_error(got.dk, ref.dk), 2e-2) << "dk " << tag;
  }
}

TEST(CudaFlashAttention, MatchesFloat64ReferenceAcrossShapes) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (int64_t D : {64, 128}) {
    // Grouped-query ratios 1, 4, 8; lengths 1, below one tile, not a multiple of the tile, whole tiles.
    for (Dims d : {Dims{2, 1, 4, 4, D}, Dims{2, 100, 4, 1, D}, Dims{1, 1000, 8, 1, D}, Dims{3, 192, 8, 2, D},
                   Dims{1, 128, 32, 4, D}}) {
      d.D = D;
      expect_matches_reference(d, random_inputs(d, seed += 10), false);
    }
  }
}

TEST(CudaFlashAttention, PackedProjectionsAreReadInPlace) {
  SKIP_WITHOUT_GPU();
  for (Dims d : {Dims{2, 77, 12, 12, 64}, Dims{1, 300, 2, 2, 128}})
    expect_matches_reference(d, random_inputs(d, 5), true);
}

TEST(CudaFlashAttention, LongSequence) {
  SKIP_WITHOUT_GPU();
  const Dims d{1, 4096, 2, 1, 64};
  expect_matches_reference(d, random_inputs(d, 17), false);
}

// Scores of magnitude ~1e4: an implementation that exponentiates without subtracting the running max overflows.
// (a) A shared direction in q and k (column 0 of every head, value `big`) adds ~1e4 to every score of a row, so the
// softmax stays spread out; every output is checked, except dq's column 0: it is scale big sum_j dS_j, exactly 0
// (a row of dS sums to 0), so what the kernel leaves there is the bf16 rounding of dS times big (~300), an error of
// the bf16 dS (the materialising path rounds dS to bf16 too) measured against nothing; it is only asked to be small
// next to big times the size of dq's other columns. (b) q and k scaled so scores differ by ~1e4 within a row: the
// softmax is one-hot, dq and dk are ~0 in exact arithmetic (dS = P (dP - Dvec) with P in {0, 1}) and carry only
// rounding, so only their finiteness is asked of them, with the output, lse and dv checked as usual.
TEST(CudaFlashAttention, ScoresOfMagnitude1e4) {
  SKIP_WITHOUT_GPU();
  for (int64_t D : {64, 128}) {
    const Dims d{1, 200, 4, 2, D};
    Inputs in = random_inputs(d, 23);
    // Column 0 of every q and k row set to sqrt(1e4 sqrt(D)) (bf16-rounded): q . k / sqrt(D) gains ~1e4.
    const double big =
        Tensor::from_floats({static_cast<float>(std::sqrt(1e4 * std::sqrt(static_cast<double>(D))))}, {1}, DType::BF16)
            .to_doubles()[0];
    for (size_t i = 0; i < in.q.size(); i += D) in.q[i] = big;
    for (size_t i = 0; i < in.k.size(); i += D) in.k[i] = big;
    {
      const Result ref = reference(d, in);
      const Result got = run_flash(d, in, false);
      const std::string tag = "shared offset " + d.str();
      EXPECT_LE(relative_error(got.out, ref.out), 1e-2) << "out " << tag;
      expect_lse_close(got.lse, ref.lse, tag);
      EXPECT_LE(relative_error(got.dk, ref.dk), 2e-2) << "dk " << tag;
      EXPECT_LE(relative_error(got.dv, ref.dv), 1e-2) << "dv " << tag;
      std::vector<double> rest, rest_ref;
      double col0 = 0, rest_norm = 0;
      for (size_t i = 0; i < ref.dq.size(); ++i) {
        if (i % D == 0) {
          col0 = std::max(col0, std::abs(got.dq[i]));
        } else {
          rest.push_back(got.dq[i]);
          rest_ref.push_back(ref.dq[i]);
          rest_norm = std::max(rest_norm, std::abs(ref.dq[i]));
        }
      }
      EXPECT_LE(relative_error(rest, rest_ref), 2e-2) << "dq columns 1.. " << tag;
      EXPECT_LE(col0, 2e-2 * big * rest_norm) << "dq column 0 " << tag;
    }

    const double spread = std::sqrt(1e4 / std::sqrt(static_cast<double>(D)));  // |q . k| / sqrt(D) ~ 1e4
    const Inputs sharp = random_inputs(d, 29, spread);
    expect_matches_reference(d, sharp, false, /*check_dq_dk=*/false);
    const Result got = run_flash(d, sharp, false);
    for (double x : got.dq) ASSERT_TRUE(std::isfinite(x)) << "dq one-hot D" << D;
    for (double x : got.dk) ASSERT_TRUE(std::isfinite(x)) << "dk one-hot D" << D;
  }
}

// The fused and materialising kernels agree on the same bf16 inputs (both within bf16 rounding of the truth).
TEST(CudaFlashAttention, AgreesWithMaterialisedPath) {
  SKIP_WITHOUT_GPU();
  const Dims d{2, 333, 8, 2, 128};
  const Inputs in = random_inputs(d, 41);
  const Result flash = run_flash(d, in, false);
  const int64_t C = d.H * d.D, KC = d.KV * d.D;
  Tensor q = gpu_bf16(in.q, {d.B, d.T, C}), k = gpu_bf16(in.k, {d.B, d.T, KC}), v = gpu_bf16(in.v, {d.B, d.T, KC});
  Tensor out = nan_gpu({d.B, d.T, C}, DType::BF16), probs = nan_gpu({d.B, d.H, d.T, d.T}, DType::BF16);
  kernels::cuda::attention_forward(q, k, v, 8, 2, out, probs);
  Tensor dq = nan_gpu(q.shape(), DType::BF16), dk = nan_gpu(k.shape(), DType::BF16),
         dv = nan_gpu(v.shape(), DType::BF16);
  kernels::cuda::attention_backward(gpu_bf16(in.dout, {d.B, d.T, C}), q, k, v, probs, 8, 2, dq, dk, dv);
  EXPECT_LE(relative_error(flash.out, out.to_doubles()), 1e-2);
  EXPECT_LE(relative_error(flash.dq, dq.to_doubles()), 3e-2);
  EXPECT_LE(relative_error(flash.dk, dk.to_doubles()), 3e-2);
  EXPECT_LE(relative_error(flash.dv, dv.to_doubles()), 2e-2);
}

// `name`=`value` in the environment while in scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) { setenv(name.c_str(), value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

// The wgmma kernels (the default on an H100 / H200) and the mma.sync ones (RETORT_FLASH_FORWARD=mma,
// RETORT_FLASH_BACKWARD=mma) give the same output, log-sum-exp and gradients up to the order of their float32 sums
// and bf16 roundings, on lengths that end inside a tile, both head sizes (at 64 both key tiles of each kernel) and
// grouped-query ratios of 1 and 4; so do the wgmma kernels' other schedules (pipelined or lockstep on shared-memory
// or CTA barriers; the loads by the copy engine or by every thread) and each way the
// pipelined backward adds dQ (atomics in the gradient's row order or in the
// registers' order, or the copy engine's bulk reductions), each order its CTAs walk the query tiles in, and both
// orders of the grid, and the forward persistent or a CTA a work item. On other GPUs every run takes mma.sync.
TEST(CudaFlashAttention, WarpgroupAndMmaSyncKernelsAgree) {
  SKIP_WITHOUT_GPU();
  // (333 and 129 rows take the backward's cp.async loads: the tensor maps of lse and Dvec need T a multiple of 4. At
  // 3 x 4000 x 4 x 2 the backward's grid on 132 multiprocessors is a chunk of 4 (batch, key/value head) pairs and one
  // of 2. 3 x 4000 x 4 x 2 x 128 (384 query tiles) and 3 x 2000 x 8 x 2 x 64 (384, two CTAs a multiprocessor) give
  // the persistent forward's CTAs several work items each, on an H100 or H200.)
  for (const Dims d : {Dims{2, 333, 8, 2, 128}, Dims{2, 204, 8, 2, 128}, Dims{1, 1000, 4, 1, 64},
                       Dims{3, 129, 2, 2, 64}, Dims{3, 4000, 4, 2, 128}, Dims{3, 2000, 8, 2, 64}}) {
    const Inputs in = random_inputs(d, 61);
    Result mma_sync;
    {
      ScopedEnv forward("RETORT_FLASH_FORWARD", "mma"), backward("RETORT_FLASH_BACKWARD", "mma");
      mma_sync = run_flash(d, in, false);
    }
    std::vector<std::pair<std::string, Result>> runs;
    runs.emplace_back("default", run_flash(d, in, false));
    if (d.D == 64) {  // the other key tiles at head size 64
      ScopedEnv forward_keys("RETORT_FLASH_FORWARD_KEYS", "128"), backward_keys("RETORT_FLASH_BACKWARD_KEYS", "64");
      runs.emplace_back("the other key tiles", run_flash(d, in, false));
    }
    {  // the other schedule of each wgmma kernel: lockstep backward and forward
      ScopedEnv backward_schedule("RETORT_FLASH_BACKWARD_SCHEDULE", "lockstep"),
          forward_schedule("RETORT_FLASH_FORWARD_SCHEDULE", "lockstep");
      runs.emplace_back("the other schedules", run_flash(d, in, false));
    }
    {  // the forward's and the backward's loads by every thread instead of the copy engine
      ScopedEnv forward_schedule("RETORT_FLASH_FORWARD_SCHEDULE", "pipelined"),
          backward_loads("RETORT_FLASH_BACKWARD_LOADS", "cp.async");
      runs.emplace_back("the loads by every thread", run_flash(d, in, false));
    }
    for (const char* dq : {"rows", "atomics", "bulk"}) {  // each way the pipelined backward adds dQ
      ScopedEnv dq_layout("RETORT_FLASH_BACKWARD_DQ", dq);
      runs.emplace_back(std::string("dQ in ") + dq, run_flash(d, in, false));
    }
    for (const char* walk : {"diagonal", "aligned"}) {  // the pipelined backward's other orders of query tiles
      ScopedEnv order("RETORT_FLASH_BACKWARD_WALK", walk);
      runs.emplace_back(std::string("walk ") + walk, run_flash(d, in, false));
    }
    {  // the grid with the tile fastest
      ScopedEnv grid("RETORT_FLASH_GRID", "tile-fastest");
      runs.emplace_back("the grid with the tile fastest", run_flash(d, in, false));
    }
    for (const char* persistent : {"0", "1"}) {  // the forward a CTA a work item, and persistent
      ScopedEnv forward_ctas("RETORT_FLASH_FORWARD_PERSISTENT", persistent);
      runs.emplace_back(std::string("the forward persistent ") + persistent, run_flash(d, in, false));
    }
    for (const auto& [name, hopper] : runs) {
      const std::string tag = d.str() + " " + name;
      EXPECT_LE(relative_error(hopper.out, mma_sync.out), 5e-3) << tag;
      for (size_t i = 0; i < hopper.lse.size(); ++i)
        ASSERT_NEAR(hopper.lse[i], mma_sync.lse[i], 1e-5 * (1 + std::abs(mma_sync.lse[i]))) << tag << " row " << i;
      EXPECT_LE(relative_error(hopper.dq, mma_sync.dq), 1e-2) << tag;
      EXPECT_LE(relative_error(hopper.dk, mma_sync.dk), 1e-2) << tag;
      EXPECT_LE(relative_error(hopper.dv, mma_sync.dv), 1e-2) << tag;
    }
  }
}

// RETORT_ATTENTION=materialized while in scope.
struct ForceMaterialised {
  ForceMaterialised() { setenv("RETORT_ATTENTION", "materialized", 1); }
  ~ForceMaterialised() { unsetenv("RETORT_ATTENTION"); }
};

// The ops take the fused path for bf16 on the GPU (and the materialising one when told), with the same results and
// gradients through autograd.
TEST(CudaFlashAttention, OpsSwitchPathsWithTheSameResults) {
  SKIP_WITHOUT_GPU();
  const Dims d{2, 130, 4, 2, 64};
  const Inputs in = random_inputs(d, 51);
  const int64_t C = d.H * d.D, KC = d.KV * d.D;
  Tensor q = gpu_bf16(in.q, {d.B, d.T, C}), k = gpu_bf16(in.k, {d.B, d.T, KC}), v = gpu_bf16(in.v, {d.B, d.T, KC});
  const Tensor dout = gpu_bf16(in.dout, {d.B, d.T, C});
  ASSERT_TRUE(kernels::flash_attention_applies(q, k, v, d.D));
  {
    ForceMaterialised force;
    EXPECT_FALSE(kernels::flash_attention_applies(q, k, v, d.D));
  }
  const Result ref = reference(d, in);
  for (bool materialised : {false, true}) {
    std::optional<ForceMaterialised> force;
    if (materialised) force.emplace();
    for (Tensor* t : {&q, &k, &v}) {
      t->zero_grad();
      t->set_requires_grad();
    }
    Tensor out = ops::causal_attention(q, k, v, static_cast<int>(d.H), static_cast<int>(d.KV));
    out.backward(dout);
    const std::string tag = materialised ? "materialised" : "fused";
    EXPECT_LE(relative_error(out.to_doubles(), ref.out), 1e-2) << tag;
    EXPECT_LE(relative_error(q.grad().to_doubles(), ref.dq), 2e-2) << tag;
    EXPECT_LE(relative_error(k.grad().to_doubles(), ref.dk), 2e-2) << tag;
    EXPECT_LE(relative_error(v.grad().to_doubles(), ref.dv), 1e-2) << tag;
  }

  // The packed op (GPT's) on the same numbers with KV = H.
  const Dims p{2, 130, 4, 4, 64};
  const Inputs pin = random_inputs(p, 53);
  const Result pref = reference(p, pin);
  std::vector<double> qkv;
  for (int64_t bt = 0; bt < p.B * p.T; ++bt)
    for (const auto* part : {&pin.q, &pin.k, &pin.v})
      qkv.insert(qkv.end(), part->begin() + bt * C, part->begin() + (bt + 1) * C);
  Tensor packed = gpu_bf16(qkv, {p.B, p.T, 3 * C});
  packed.set_requires_grad();
  Tensor out = ops::causal_self_attention(packed, static_cast<int>(p.H));
  out.backward(gpu_bf16(pin.dout, {p.B, p.T, C}));
  EXPECT_LE(relative_error(out.to_doubles(), pref.out), 1e-2);
  const std::vector<double> g = packed.grad().to_doubles();
  EXPECT_LE(relative_error(columns(g, 3 * C, 0, C), pref.dq), 2e-2);
  EXPECT_LE(relative_error(columns(g, 3 * C, C, C), pref.dk), 2e-2);
  EXPECT_LE(relative_error(columns(g, 3 * C, 2 * C, C), pref.dv), 1e-2);
}

TEST(CudaFlashAttention, RejectsWhatItDoesNotTake) {
  SKIP_WITHOUT_GPU();
  Tensor q32 = Tensor::zeros({1, 8, 128}, DType::F32, kGpu);
  EXPECT_FALSE(kernels::flash_attention_applies(q32, q32, q32, 64));  // f32 takes the materialising path
  Tensor q = Tensor::zeros({1, 8, 96}, DType::BF16, kGpu);
  EXPECT_FALSE(kernels::flash_attention_applies(q, q, q, 32));  // head size 32
  Tensor out = Tensor::zeros({1, 8, 96}, DType::BF16, kGpu), lse = Tensor::zeros({1, 3, 8}, DType::F32, kGpu);
  EXPECT_THROW(kernels::flash_attention_forward(q, q, q, 3, 3, out, lse), Error);
}

}  // namespace
}  // namespace retort

#endif  // RETORT_WITH_CUDA
