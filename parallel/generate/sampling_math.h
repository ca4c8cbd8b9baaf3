#pragma once
// The per-token arithmetic of the vocab-parallel sampler, written once for the CPU passes, the host-side work on
// top-k candidates and the CUDA kernels (hence __host__ __device__ under nvcc).
//
// Everything here is bit-identical on every backend, so a token never depends on where it was drawn:
//   - integer work (the Philox generator, order keys, packing) is exact by nature;
//   - the floating-point work uses only IEEE-754 operations that both the CPU and the GPU round correctly
//     (+, -, *, /, fma, conversions), with every multiply-add spelled as an explicit fma and no other product
//     feeding a sum, so no compiler contraction can change a result. The logarithm and the exponential are
//     polynomials written here instead of libm's logf/expf, whose last bits differ between glibc and CUDA.
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define RETORT_SAMPLER_HD __host__ __device__ __forceinline__
#else
#define RETORT_SAMPLER_HD inline
#endif

namespace retort::generate::sampling {

// ---- bit casts that compile on both sides --------------------------------------------------------------------
RETORT_SAMPLER_HD uint64_t bits_of(double v) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}
RETORT_SAMPLER_HD double double_of(uint64_t b) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(b));
#else
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
#endif
}
RETORT_SAMPLER_HD uint32_t bits_of(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}
RETORT_SAMPLER_HD float float_of(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
#endif
}
RETORT_SAMPLER_HD double round_down(double v) {
#ifdef __CUDA_ARCH__
  return floor(v);
#else
  return __builtin_floor(v);
#endif
}
RETORT_SAMPLER_HD double fused_multiply_add(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

// ---- order keys: a float's rank as an unsigned integer ---------------------------------------------------------
// Larger float -> larger key; -0 and +0 share a key (as in kernels::topk). Every NaN maps to kNanKey, above +inf,
// so a NaN always wins a maximum and is reported instead of silently sampled; kNanKey is also low enough that a
// packed candidate (below) stays a finite double.
inline constexpr uint32_t kNanKey = 0xFFC00000u;
inline constexpr uint32_t kPositiveInfinityKey = 0xFF800000u;
inline constexpr uint32_t kNegativeInfinityKey = 0x007FFFFFu;

RETORT_SAMPLER_HD uint32_t order_key(float v) {
  if (v != v) return kNanKey;
  if (v == 0.f) v = 0.f;
  const uint32_t bits = bits_of(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
RETORT_SAMPLER_HD float value_of_key(uint32_t key) {
  return float_of((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// ---- candidates: (score, global id) packed so that one integer (or double) maximum picks the winner -------------
// (key << 31) | (2^31 - 1 - id): a higher score wins, and among equal scores the smaller id. The top bit stays 0
// and, for every key up to kNanKey, the exponent field is neither 0 nor all ones, so read as a double the packed
// value is a positive normal number ordered exactly like the integer: a MAX all-reduce of doubles is the MAX of
// the packed integers. 0 means "no candidate".
RETORT_SAMPLER_HD uint64_t pack_candidate(uint32_t key, int64_t id) {
  return (static_cast<uint64_t>(key) << 31) | (0x7FFFFFFFull - static_cast<uint64_t>(id));
}
RETORT_SAMPLER_HD uint32_t key_of_candidate(uint64_t packed) {
  return static_cast<uint32_t>(packed >> 31);
}
RETORT_SAMPLER_HD int64_t id_of_candidate(uint64_t packed) {
  return static_cast<int64_t>(0x7FFFFFFFull - (packed & 0x7FFFFFFFull));
}

// ---- the counter-based generator -----------------------------------------------------------------------------
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011): ten rounds
// of multiply / xor with the published constants, a 128-bit counter and a 64-bit key.
struct Philox4x32 {
  uint32_t word[4];
};

RETORT_SAMPLER_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  uint32_t c0 = counter.word[0], c1 = counter.word[1], c2 = counter.word[2], c3 = counter.word[3];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// 64 random bits for (seed, row key, token): the counter is (token, 0, row key), the key the seed.
RETORT_SAMPLER_HD uint64_t philox_bits(uint64_t seed, uint64_t row_key, uint32_t token) {
  const Philox4x32 out =
      philox4x32_10(Philox4x32{{token, 0u, static_cast<uint32_t>(row_key), static_cast<uint32_t>(row_key >> 32)}},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(out.word[0]) << 32) | out.word[1];
}

// 52 random bits as the midpoint of one of 2^52 equal cells of (0, 1): never 0 nor 1 (the extremes are 2^-53 and
// 1 - 2^-53), every step exact in double.
RETORT_SAMPLER_HD double open_uniform(uint64_t bits) {
  return (static_cast<double>(bits >> 12) + 0.5) * 0x1p-52;
}

// ---- log and exp ---------------------------------------------------------------------------------------------
// log(a) for a positive normal double: a = 2^e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.172, and the odd series of atanh to s^25 (truncation below 1e-19 relative).
RETORT_SAMPLER_HD double deterministic_log(double a) {
  const uint64_t bits = bits_of(a);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  double m = double_of((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double s2 = s * s;
  // The coefficients 1/(2j+1) as exact double literals, so no compiler folds a division its own way.
  double p = 0x1.47ae147ae147bp-5;  // 1/25
  p = fused_multiply_add(p, s2, 0x1.642c8590b2164p-5);
  p = fused_multiply_add(p, s2, 0x1.8618618618618p-5);
  p = fused_multiply_add(p, s2, 0x1.af286bca1af28p-5);
  p = fused_multiply_add(p, s2, 0x1.e1e1e1e1e1e1ep-5);
  p = fused_multiply_add(p, s2, 0x1.1111111111111p-4);
  p = fused_multiply_add(p, s2, 0x1.3b13b13b13b14p-4);
  p = fused_multiply_add(p, s2, 0x1.745d1745d1746p-4);
  p = fused_multiply_add(p, s2, 0x1.c71c71c71c71cp-4);
  p = fused_multiply_add(p, s2, 0x1.2492492492492p-3);
  p = fused_multiply_add(p, s2, 0x1.999999999999ap-3);
  p = fused_multiply_add(p, s2, 0x1.5555555555555p-2);
  const double s3 = s * s2;
  const double log_m = 2.0 * fused_multiply_add(s3, p, s);
  return fused_multiply_add(static_cast<double>(e), 0x1.62e42fefa39efp-1, log_m);  // + e ln 2
}

// e^y for y <= 0; 0 below -40 (far under the 2^-44 resolution of the masses below) and for y = -inf.
// y = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^14 (truncation below 1e-17 relative).
RETORT_SAMPLER_HD double deterministic_exp(double y) {
  if (!(y > -40.0)) return 0.0;
  const double k = round_down(fused_multiply_add(y, 0x1.71547652b82fep0, 0.5));  // round(y / ln2)
  double r = fused_multiply_add(-k, 0x1.62e42fee00000p-1, y);                    // ln2, high part
  r = fused_multiply_add(-k, 0x1.a39ef35793c76p-33, r);                          // ln2, low part
  double p = 0x1.93974a8c07c9dp-37;                                              // 1/14!
  p = fused_multiply_add(p, r, 0x1.6124613a86d09p-33);                           // 1/13!
  p = fused_multiply_add(p, r, 0x1.1eed8eff8d898p-29);                           // 1/12!
  p = fused_multiply_add(p, r, 0x1.ae64567f544e4p-26);                           // 1/11!
  p = fused_multiply_add(p, r, 0x1.27e4fb7789f5cp-22);                           // 1/10!
  p = fused_multiply_add(p, r, 0x1.71de3a556c734p-19);                           // 1/9!
  p = fused_multiply_add(p, r, 0x1.a01a01a01a01ap-16);                           // 1/8!
  p = fused_multiply_add(p, r, 0x1.a01a01a01a01ap-13);                           // 1/7!
  p = fused_multiply_add(p, r, 0x1.6c16c16c16c17p-10);                           // 1/6!
  p = fused_multiply_add(p, r, 0x1.1111111111111p-7);                            // 1/5!
  p = fused_multiply_add(p, r, 0x1.5555555555555p-5);                            // 1/4!
  p = fused_multiply_add(p, r, 0x1.5555555555555p-3);                            // 1/3!
  p = fused_multiply_add(p, r, 0.5);
  p = fused_multiply_add(p, r, 1.0);
  p = fused_multiply_add(p, r, 1.0);
  // 2^k built from its bits (k >= -58 here): an exact scaling.
  return p * double_of(static_cast<uint64_t>(1023 + static_cast<int>(k)) << 52);
}

// ---- the sampler's per-token quantities -----------------------------------------------------------------------
// Standard Gumbel noise of token `id` in row `row_key`: -log(-log u). With 52-bit uniforms it spans about
// [-3.6, 36.7], so even the largest of millions of draws is not truncated.
RETORT_SAMPLER_HD double gumbel_noise(uint64_t seed, uint64_t row_key, int64_t id) {
  const double u = open_uniform(philox_bits(seed, row_key, static_cast<uint32_t>(id)));
  return -deterministic_log(-deterministic_log(u));
}

// The order key of token x's Gumbel-max score x / T + g, rounded to float. For T < 1 the same argmax is scored
// as x + T g (the score times T), which cannot overflow however small T is; for T >= 1 as x / T + g, which
// cannot overflow however large T is. A -inf logit scores -inf.
RETORT_SAMPLER_HD uint32_t score_key(float x, double temperature, double noise) {
  const double score = temperature >= 1.0 ? static_cast<double>(x) / temperature + noise
                                          : fused_multiply_add(temperature, noise, static_cast<double>(x));
  return order_key(static_cast<float>(score));
}

// Nucleus masses are fixed-point integers: round(e^{(x - max) / T} 2^44). Integer sums are exact and
// associative, so the mass above a threshold is the same bit for bit whatever the tp size, the order of a GPU's
// atomics or the backend, and so is the nucleus. A shard holds at most 2^19 tokens, so a rank's sums stay below 2^63.
inline constexpr int kMassBits = 44;
inline constexpr int64_t kMaxShardTokens = int64_t{1} << 19;

RETORT_SAMPLER_HD uint64_t quantized_mass(float x, float row_max, double temperature) {
  const double y = (static_cast<double>(x) - static_cast<double>(row_max)) / temperature;
  return static_cast<uint64_t>(fused_multiply_add(deterministic_exp(y), 0x1p44, 0.5));
}

// The nucleus threshold is found digit by digit on the order keys: 8 passes of 4 bits, 16 bins each.
inline constexpr int kDigitBits = 4;
inline constexpr int kBins = 1 << kDigitBits;
inline constexpr int kDigitPasses = 32 / kDigitBits;

}  // namespace retort::generate::sampling
