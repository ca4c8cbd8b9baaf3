// The sampler's per-token arithmetic (parallel/generate/sampling_math.h): Philox4x32-10 against the published
// known-answer vectors, the polynomial log and exp against long-double libm, the uniform's open interval, the
// Gumbel noise's range, the order keys, and the packing of (score, id) whose double view must order exactly like
// the integer (the MAX all-reduce relies on it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "parallel/generate/sampling_math.h"

namespace retort::generate::sampling {
namespace {

TEST(SamplingMath, PhiloxMatchesThePublishedKnownAnswers) {
  struct Vector {
    Philox4x32 counter;
    uint32_t key0, key1;
    Philox4x32 want;
  };
  // Random123's kat_vectors for philox4x32 with 10 rounds.
  const Vector vectors[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Vector& v : vectors) {
    const Philox4x32 got = philox4x32_10(v.counter, v.key0, v.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.word[i], v.want.word[i]) << "word " << i;
  }
}

TEST(SamplingMath, LogAndExpAreAccurateToADoubleUlpOrTwo) {
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<double> exponent(-60.0, 6.0);
  double worst_log = 0, worst_exp = 0;
  for (int i = 0; i < 200000; ++i) {
    const double a = std::exp2(exponent(gen));
    const long double want = std::log(static_cast<long double>(a));
    if (want != 0) worst_log = std::max<double>(worst_log, std::abs((deterministic_log(a) - want) / want));
    const double y = -40.0 * static_cast<double>(gen() >> 11) * 0x1p-53;
    const long double e = std::exp(static_cast<long double>(y));
    worst_exp = std::max<double>(worst_exp, std::abs((deterministic_exp(y) - e) / e));
  }
  // Near a = 1 the log is tiny: check it where it matters for the noise, at u = 1 - 2^-53.
  const double near_one = 1.0 - 0x1p-53;
  EXPECT_NEAR(deterministic_log(near_one) / -0x1p-53, 1.0, 1e-15);
  EXPECT_LT(worst_log, 4e-16);
  EXPECT_LT(worst_exp, 4e-16);
  EXPECT_EQ(deterministic_exp(0.0), 1.0);
  EXPECT_EQ(deterministic_exp(-40.5), 0.0);
  EXPECT_EQ(deterministic_exp(-std::numeric_limits<double>::infinity()), 0.0);
}

TEST(SamplingMath, UniformsAreStrictlyInsideTheUnitIntervalAndTheNoiseIsFinite) {
  EXPECT_EQ(open_uniform(0), 0x1p-53);
  EXPECT_EQ(open_uniform(~uint64_t{0}), 1.0 - 0x1p-53);
  const double low = -deterministic_log(-deterministic_log(0x1p-53));
  const double high = -deterministic_log(-deterministic_log(1.0 - 0x1p-53));
  EXPECT_NEAR(low, -std::log(-std::log(0x1p-53)), 1e-14);
  EXPECT_NEAR(high, -std::log(0x1p-53), 1e-12);  // -log(-log(1 - e)) = -log(e) to first order
  EXPECT_GT(high, 36.0);
  // The mean of Gumbel noise is the Euler-Mascheroni constant, its variance pi^2 / 6.
  double sum = 0, sum_sq = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    const double g = gumbel_noise(7, 11, i);
    sum += g;
    sum_sq += g * g;
  }
  const double mean = sum / n, variance = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5772156649, 0.01);  // 5 standard errors (sd 1.28 / sqrt(n) = 0.002)
  EXPECT_NEAR(variance, M_PI * M_PI / 6, 0.03);
}

TEST(SamplingMath, OrderKeysAndPackedCandidatesOrderLikeTheValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float ascending[] = {-inf, -3e38f, -1.f, -1e-40f, 0.f, 1e-40f, 0.5f, 1.f, 3e38f, inf};
  for (size_t i = 0; i + 1 < std::size(ascending); ++i) {
    EXPECT_LT(order_key(ascending[i]), order_key(ascending[i + 1])) << ascending[i];
    EXPECT_EQ(value_of_key(order_key(ascending[i])), ascending[i]);
  }
  EXPECT_EQ(order_key(-0.f), order_key(0.f));
  EXPECT_EQ(order_key(-inf), kNegativeInfinityKey);
  EXPECT_EQ(order_key(inf), kPositiveInfinityKey);
  EXPECT_EQ(order_key(std::nanf("")), kNanKey);
  EXPECT_EQ(order_key(-std::nanf("")), kNanKey);

  // Packed candidates: a higher key wins, then the smaller id; their double view orders the same way and is a
  // positive normal number (so a MAX all-reduce of doubles compares them exactly).
  std::mt19937_64 gen(3);
  const uint32_t keys[] = {kNegativeInfinityKey, order_key(-1.f),      order_key(0.f),
                           order_key(2.f),       kPositiveInfinityKey, kNanKey};
  const int64_t ids[] = {0, 1, 2, 50256, 262143, 0x7FFFFFFF};
  for (uint32_t ka : keys)
    for (int64_t ia : ids) {
      const uint64_t a = pack_candidate(ka, ia);
      EXPECT_EQ(key_of_candidate(a), ka);
      EXPECT_EQ(id_of_candidate(a), ia);
      EXPECT_TRUE(std::isnormal(double_of(a)) && double_of(a) > 0) << ka << " " << ia;
      for (uint32_t kb : keys)
        for (int64_t ib : ids) {
          const uint64_t b = pack_candidate(kb, ib);
          const bool a_wins = ka != kb ? ka > kb : ia < ib;
          if (ka == kb && ia == ib) continue;
          EXPECT_EQ(a > b, a_wins);
          EXPECT_EQ(double_of(a) > double_of(b), a_wins);
        }
    }
}

TEST(SamplingMath, QuantizedMassesAreFixedPointProbabilities) {
  EXPECT_EQ(quantized_mass(3.f, 3.f, 0.7), uint64_t{1} << kMassBits);
  EXPECT_EQ(quantized_mass(-std::numeric_limits<float>::infinity(), 3.f, 1.0), 0u);
  EXPECT_EQ(quantized_mass(-100.f, 3.f, 1.0), 0u);
  EXPECT_EQ(quantized_mass(2.f, 3.f, 1e-30), 0u);  // a tiny temperature keeps only the maximum
  const double want = std::exp((1.0 - 3.0) / 0.5) * 0x1p44;
  EXPECT_NEAR(static_cast<double>(quantized_mass(1.f, 3.f, 0.5)), want, 0.5);
}

}  // namespace
}  // namespace retort::generate::sampling
