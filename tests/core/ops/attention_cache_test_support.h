#pragma once
// Shared by the CPU and CUDA tests of ops::attention_with_kv_cache: random cases (random caches, random q|k|v of
// the new positions, random start positions per row), the float64 attention written out here, and the check of
// the op's output and of the caches it wrote against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/tensor/tensor.h"

namespace retort::attention_cache_testing {

struct CacheCase {
  int64_t B = 3, Tn = 1, H = 2, D = 8, cap = 12;
  std::vector<int64_t> starts;  // empty: drawn at random so that every new position fits the cache
  uint32_t seed = 1;
  int64_t C() const { return H * D; }
};

inline std::vector<double> normal_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<float>(normal(gen));
  return v;
}

inline std::vector<int64_t> starts_of(const CacheCase& c) {
  if (!c.starts.empty()) return c.starts;
  std::mt19937 gen(c.seed + 1000);
  std::uniform_int_distribution<int64_t> pick(0, c.cap - c.Tn);
  std::vector<int64_t> s;
  for (int64_t b = 0; b < c.B; ++b) s.push_back(pick(gen));
  s.back() = c.cap - c.Tn;  // one row fills its cache to the last slot
  return s;
}

// The case's inputs as the op sees them (rounded to its dtype), the op's output and the caches afterwards.
struct CacheRun {
  std::vector<int64_t> starts;
  std::vector<double> qkv, k_before, v_before;
  std::vector<double> out, k_after, v_after;
};

inline CacheRun run_case(const CacheCase& c, DType dtype, Device device) {
  CacheRun r;
  r.starts = starts_of(c);
  const Shape cache_shape{c.B, c.H, c.cap, c.D};
  const size_t cache_n = static_cast<size_t>(c.B * c.H * c.cap * c.D);
  const Tensor qkv = Tensor::from_doubles(normal_values(static_cast<size_t>(c.B * c.Tn * 3 * c.C()), c.seed),
                                          {c.B, c.Tn, 3 * c.C()}, DType::F64)
                         .to(dtype);
  const Tensor k0 = Tensor::from_doubles(normal_values(cache_n, c.seed + 1), cache_shape, DType::F64).to(dtype);
  const Tensor v0 = Tensor::from_doubles(normal_values(cache_n, c.seed + 2), cache_shape, DType::F64).to(dtype);
  r.qkv = qkv.to_doubles();
  r.k_before = k0.to_doubles();
  r.v_before = v0.to_doubles();
  Tensor k_cache = k0.to(device), v_cache = v0.to(device);
  NoGradGuard no_grad;
  const Tensor out = ops::attention_with_kv_cache(qkv.to(device), k_cache, v_cache, r.starts, static_cast<int>(c.H));
  EXPECT_EQ(out.shape(), Shape({c.B, c.Tn, c.C()}));
  EXPECT_EQ(out.dtype(), dtype);
  r.out = out.to_doubles();
  r.k_after = k_cache.to_doubles();
  r.v_after = v_cache.to_doubles();
  return r;
}

// Float64 attention of every new query over its row's keys [0, start + t]: the cache's old keys below start,
// then the new ones taken from q|k|v. Output [B, Tn, C].
inline std::vector<double> reference_attention(const CacheCase& c, const CacheRun& r) {
  const int64_t C = c.C();
  std::vector<double> out(static_cast<size_t>(c.B * c.Tn * C));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t s = r.starts[static_cast<size_t>(b)];
      auto cached = [&](const std::vector<double>& cache, int64_t j, int64_t d) {
        return cache[static_cast<size_t>(((b * c.H + h) * c.cap + j) * c.D + d)];
      };
      auto fresh = [&](int part, int64_t j, int64_t d) {
        return r.qkv[static_cast<size_t>((b * c.Tn + (j - s)) * 3 * C + part * C + h * c.D + d)];
      };
      for (int64_t t = 0; t < c.Tn; ++t) {
        const int64_t seen = s + t + 1;
        std::vector<double> p(static_cast<size_t>(seen));
        double top = -INFINITY, total = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += fresh(0, s + t, d) * (j < s ? cached(r.k_before, j, d) : fresh(1, j, d));
          p[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(c.D));
          top = std::max(top, p[static_cast<size_t>(j)]);
        }
        for (auto& x : p) total += (x = std::exp(x - top));
        for (int64_t d = 0; d < c.D; ++d) {
          double sum = 0;
          for (int64_t j = 0; j < seen; ++j)
            sum += p[static_cast<size_t>(j)] * (j < s ? cached(r.v_before, j, d) : fresh(2, j, d));
          out[static_cast<size_t>((b * c.Tn + t) * C + h * c.D + d)] = sum / total;
        }
      }
    }
  return out;
}

// The output within abs + rel * |want| of float64 attention; the caches hold exactly the new keys and values at
// start .. start + Tn - 1 of each row and are unchanged elsewhere (a copy, so exact).
inline void expect_matches_reference(const CacheCase& c, const CacheRun& r, double abs, double rel,
                                     const std::string& what) {
  const std::vector<double> want = reference_attention(c, r);
  const int64_t C = c.C();
  int64_t bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(r.out[i] - want[i]) > abs + rel * std::abs(want[i])) {
      ++bad;
      const int64_t row = static_cast<int64_t>(i) / (c.Tn * C), t = static_cast<int64_t>(i) / C % c.Tn;
      ADD_FAILURE() << what << ": row " << row << " query " << t << " element " << static_cast<int64_t>(i) % C << ": "
                    << r.out[i] << " vs float64 " << want[i];
    }
  }
  for (int64_t b = 0; b < c.B && bad == 0; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t s = r.starts[static_cast<size_t>(b)];
      for (int64_t j = 0; j < c.cap; ++j)
        for (int64_t d = 0; d < c.D; ++d) {
          const size_t at = static_cast<size_t>(((b * c.H + h) * c.cap + j) * c.D + d);
          const bool written = j >= s && j < s + c.Tn;
          const size_t src = static_cast<size_t>((b * c.Tn + (j - s)) * 3 * C + h * c.D + d);
          ASSERT_EQ(r.k_after[at], written ? r.qkv[src + static_cast<size_t>(C)] : r.k_before[at])
              << what << ": key slot " << j << " of row " << b << " head " << h;
          ASSERT_EQ(r.v_after[at], written ? r.qkv[src + 2 * static_cast<size_t>(C)] : r.v_before[at])
              << what << ": value slot " << j << " of row " << b << " head " << h;
        }
    }
}

inline std::string label(const CacheCase& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " B=" + std::to_string(c.B) + " Tn=" + std::to_string(c.Tn) +
         " H=" + std::to_string(c.H) + " D=" + std::to_string(c.D) + " cap=" + std::to_string(c.cap);
}

}  // namespace retort::attention_cache_testing
