// The tensor-core decode attention (core/kernels/cuda/attention_cache_mma.cu) through ops::attention_with_kv_cache
// with separate q, k, v in bf16: against float64 attention written here, for head sizes 64 and 128, grouped-query
// ratios 1 to 8, 1 to 4 new positions (up to the kernel's 16 query rows), caches whose length is not a multiple of
// its 16-key tiles, a row at the first position, a row at the end of its cache and one past it; logits in the
// hundreds; scores that grow along the cache (the running maximum moves on many tiles); and the CUDA-core kernel
// on the same inputs. RETORT_DECODE_ATTENTION picks the kernel. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/tensor/device.h"

namespace retort {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// RETORT_DECODE_ATTENTION=value while in scope; the value before (or its absence) afterwards.
struct DecodeKernel {
  explicit DecodeKernel(const char* value) {
    if (const char* before = std::getenv(kName)) previous = before, had_previous = true;
    setenv(kName, value, 1);
  }
  ~DecodeKernel() {
    if (had_previous)
      setenv(kName, previous.c_str(), 1);
    else
      unsetenv(kName);
  }
  static constexpr const char* kName = "RETORT_DECODE_ATTENTION";
  std::string previous;
  bool had_previous = false;
};

struct Case {
  int64_t B = 5, Tn = 1, H = 4, KV = 4, D = 64, cap = 70;
  std::vector<int64_t> starts;  // per row
  uint32_t seed = 1;
  double q_scale = 1.0;  // multiplies the queries: large logits
  double growth = 0.0;   // key j gets growth * j * (its row's first query) added: scores that grow with j
  std::string str() const {
    return "B " + std::to_string(B) + " Tn " + std::to_string(Tn) + " H " + std::to_string(H) + " KV " +
           std::to_string(KV) + " D " + std::to_string(D) + " cap " + std::to_string(cap) + " q x" +
           std::to_string(q_scale) + " growth " + std::to_string(growth);
  }
};

// The inputs as bf16 tensors and as the doubles they hold.
struct Inputs {
  Tensor q, k, v, k_cache, v_cache;
  std::vector<double> qd, kd, vd, kc, vc;
};

Inputs make_inputs(const Case& c) {
  std::mt19937 gen(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const auto draw = [&](int64_t n, double scale) {
    std::vector<double> x(static_cast<size_t>(n));
    for (auto& e : x) e = scale * normal(gen);
    return x;
  };
  std::vector<double> q = draw(c.B * c.Tn * c.H * c.D, c.q_scale), k = draw(c.B * c.Tn * c.KV * c.D, 1.0),
                      v = draw(c.B * c.Tn * c.KV * c.D, 1.0), kc = draw(c.B * c.KV * c.cap * c.D, 1.0),
                      vc = draw(c.B * c.KV * c.cap * c.D, 1.0);
  if (c.growth != 0.0) {
    // Position j of row b (cached or new) leans towards the row's first query of head 0 by growth * j.
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t kvh = 0; kvh < c.KV; ++kvh)
        for (int64_t j = 0; j < c.cap; ++j)
          for (int64_t d = 0; d < c.D; ++d) {
            const double lean = c.growth * static_cast<double>(j) * q[static_cast<size_t>(b * c.Tn * c.H * c.D + d)];
            const int64_t s = c.starts[static_cast<size_t>(b)];
            if (j < s)
              kc[static_cast<size_t>(((b * c.KV + kvh) * c.cap + j) * c.D + d)] += lean;
            else if (j < s + c.Tn)
              k[static_cast<size_t>(((b * c.Tn + (j - s)) * c.KV + kvh) * c.D + d)] += lean;
          }
  }
  Inputs in;
  const auto bf16 = [](const std::vector<double>& x, const Shape& shape) {
    return Tensor::from_doubles(x, shape, DType::F64).to(DType::BF16);
  };
  in.q = bf16(q, {c.B, c.Tn, c.H * c.D});
  in.k = bf16(k, {c.B, c.Tn, c.KV * c.D});
  in.v = bf16(v, {c.B, c.Tn, c.KV * c.D});
  in.k_cache = bf16(kc, {c.B, c.KV, c.cap, c.D});
  in.v_cache = bf16(vc, {c.B, c.KV, c.cap, c.D});
  in.qd = in.q.to_doubles(), in.kd = in.k.to_doubles(), in.vd = in.v.to_doubles();
  in.kc = in.k_cache.to_doubles(), in.vc = in.v_cache.to_doubles();
  return in;
}

struct Outcome {
  std::vector<double> out, k_after, v_after;
};

Outcome run_gpu(const Case& c, const Inputs& in) {
  NoGradGuard no_grad;
  const Device gpu = Device::cuda(0);
  Tensor kc = in.k_cache.to(gpu), vc = in.v_cache.to(gpu);
  const Tensor out = ops::attention_with_kv_cache(in.q.to(gpu), in.k.to(gpu), in.v.to(gpu), kc, vc, c.starts,
                                                  static_cast<int>(c.H), static_cast<int>(c.KV));
  return {out.to_doubles(), kc.to_doubles(), vc.to_doubles()};
}

// Float64 attention of new position t of row b, query head h, over positions [0, start + t]: the cache below
// start, the new keys and values from start on. NaN for a position past the cache (its output is unspecified).
std::vector<double> reference(const Case& c, const Inputs& in) {
  const int64_t group = c.H / c.KV;
  std::vector<double> out(static_cast<size_t>(c.B * c.Tn * c.H * c.D), NAN);
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t s = c.starts[static_cast<size_t>(b)];
    for (int64_t t = 0; t < c.Tn && s + t < c.cap; ++t)
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t kvh = h / group, seen = s + t + 1;
        const auto key = [&](int64_t j, int64_t d) {
          return j < s ? in.kc[static_cast<size_t>(((b * c.KV + kvh) * c.cap + j) * c.D + d)]
                       : in.kd[static_cast<size_t>(((b * c.Tn + (j - s)) * c.KV + kvh) * c.D + d)];
        };
        const auto value = [&](int64_t j, int64_t d) {
          return j < s ? in.vc[static_cast<size_t>(((b * c.KV + kvh) * c.cap + j) * c.D + d)]
                       : in.vd[static_cast<size_t>(((b * c.Tn + (j - s)) * c.KV + kvh) * c.D + d)];
        };
        std::vector<double> score(static_cast<size_t>(seen));
        double top = -INFINITY;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += in.qd[static_cast<size_t>(((b * c.Tn + t) * c.H + h) * c.D + d)] * key(j, d);
          score[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(c.D));
          top = std::max(top, score[static_cast<size_t>(j)]);
        }
        double total = 0;
        for (auto& x : score) total += (x = std::exp(x - top));
        for (int64_t d = 0; d < c.D; ++d) {
          double sum = 0;
          for (int64_t j = 0; j < seen; ++j) sum += score[static_cast<size_t>(j)] * value(j, d);
          out[static_cast<size_t>(((b * c.Tn + t) * c.H + h) * c.D + d)] = sum / total;
        }
      }
  }
  return out;
}

// bf16 output: one rounding of the float32 result to 8 significant bits (half a unit of the last place is at most
// 2^-8 of the value); the float32 work before it, with the weights split into two bf16 parts, adds far less.
constexpr double kAbs = 1e-5, kRel = 1.0 / 256 + 1e-4;

void expect_matches_reference(const Case& c, const Inputs& in, const Outcome& got, const std::string& what) {
  const std::vector<double> want = reference(c, in);
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::isnan(want[i])) continue;
    if (!(std::abs(got.out[i] - want[i]) <= kAbs + kRel * std::abs(want[i]))) {
      ++bad;
      ADD_FAILURE() << what << " " << c.str() << ": element " << i << " " << got.out[i] << " vs float64 " << want[i];
    }
  }
  // The cache: the new keys and values at start .. start + Tn - 1 (those that fit), unchanged elsewhere.
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t kvh = 0; kvh < c.KV; ++kvh)
      for (int64_t j = 0; j < c.cap; ++j)
        for (int64_t d = 0; d < c.D; ++d) {
          const int64_t s = c.starts[static_cast<size_t>(b)];
          const size_t at = static_cast<size_t>(((b * c.KV + kvh) * c.cap + j) * c.D + d);
          const bool fresh = j >= s && j < s + c.Tn;
          const size_t src = static_cast<size_t>(((b * c.Tn + (j - s)) * c.KV + kvh) * c.D + d);
          ASSERT_EQ(got.k_after[at], fresh ? in.kd[src] : in.kc[at]) << what << " key " << b << " " << kvh << " " << j;
          ASSERT_EQ(got.v_after[at], fresh ? in.vd[src] : in.vc[at])
              << what << " value " << b << " " << kvh << " " << j;
        }
}

// Rows at the first position, at the last slot, past the cache (when Tn > 1) and at random places.
std::vector<int64_t> starts_for(int64_t B, int64_t Tn, int64_t cap, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> pick(0, cap - Tn);
  std::vector<int64_t> s;
  for (int64_t b = 0; b < B; ++b) s.push_back(pick(gen));
  s[0] = 0;
  s[1] = cap - Tn;
  if (Tn > 1) s[2] = cap - 1;  // its later positions fall past the cache
  return s;
}

TEST(AttentionWithCacheMmaCuda, MatchesFloat64) {
  SKIP_WITHOUT_GPU();
  DecodeKernel mma("mma");
  struct Heads {
    int64_t H, KV;
  };
  for (const int64_t D : {64, 128})
    for (const Heads heads : {Heads{3, 3}, Heads{8, 2}, Heads{8, 1}, Heads{16, 2}})
      for (const int64_t Tn : {1, 2, 4}) {
        if (heads.H / heads.KV * Tn > 16) continue;  // the CUDA-core kernel's case
        Case c;
        c.Tn = Tn, c.H = heads.H, c.KV = heads.KV, c.D = D;
        c.seed = static_cast<uint32_t>(D * 1000 + heads.H * 100 + heads.KV * 10 + Tn);
        c.starts = starts_for(c.B, Tn, c.cap, c.seed);
        const Inputs in = make_inputs(c);
        expect_matches_reference(c, in, run_gpu(c, in), "tensor cores");
      }
}

TEST(AttentionWithCacheMmaCuda, LargeAndGrowingLogits) {
  SKIP_WITHOUT_GPU();
  DecodeKernel mma("mma");
  for (const int64_t D : {64, 128}) {
    Case large;  // logits with a spread of about 40 (natural units): one or two keys take nearly all the weight
    large.H = 8, large.KV = 2, large.Tn = 2, large.D = D, large.cap = 300, large.q_scale = 40.0, large.seed = 5;
    large.starts = starts_for(large.B, large.Tn, large.cap, 6);
    const Inputs a = make_inputs(large);
    expect_matches_reference(large, a, run_gpu(large, a), "large logits");
    Case growing;  // scores rise along the cache by ~0.4 a position: the running maximum moves on most tiles
    growing.H = 4, growing.KV = 4, growing.D = D, growing.cap = 500, growing.growth = 0.05, growing.seed = 7;
    growing.starts = starts_for(growing.B, growing.Tn, growing.cap, 8);
    const Inputs b = make_inputs(growing);
    expect_matches_reference(growing, b, run_gpu(growing, b), "growing scores");
  }
}

TEST(AttentionWithCacheMmaCuda, AgreesWithTheCudaCoreKernel) {
  SKIP_WITHOUT_GPU();
  // GPT-2 small's decode at batch 32 (12 heads of 64) and a Llama-3.2-1B-shaped one (32 query heads over 8), over
  // contexts up to 512; both kernels against float64 and against each other.
  struct Heads {
    int64_t H, KV;
  };
  for (const Heads heads : {Heads{12, 12}, Heads{32, 8}}) {
    Case c;
    c.B = 32, c.H = heads.H, c.KV = heads.KV, c.D = 64, c.cap = 512, c.seed = static_cast<uint32_t>(heads.KV);
    for (int64_t b = 0; b < c.B; ++b) c.starts.push_back(b * 131 % 500);
    c.starts.back() = 511;
    const Inputs in = make_inputs(c);
    Outcome tensor_cores, lanes;
    {
      DecodeKernel pick("mma");
      tensor_cores = run_gpu(c, in);
    }
    {
      DecodeKernel pick("lanes");
      lanes = run_gpu(c, in);
    }
    expect_matches_reference(c, in, tensor_cores, "tensor cores");
    expect_matches_reference(c, in, lanes, "CUDA cores");
    // Both within a bf16 rounding of float64, so within two of each other.
    for (size_t i = 0; i < lanes.out.size(); ++i)
      ASSERT_NEAR(tensor_cores.out[i], lanes.out[i], 2e-5 + 2.0 / 256 * std::abs(lanes.out[i])) << "element " << i;
  }
}

}  // namespace
}  // namespace retort
