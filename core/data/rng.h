#pragma once
// A seeded generator whose output is the same on every platform and standard library, so a data order
// (document split, epoch shuffle) can be reproduced anywhere from its seed. std::mt19937_64 would be
// portable too, but std::uniform_int_distribution and std::shuffle are not, so the mapping is ours.
#include <cstdint>
#include <span>
#include <utility>

namespace retort::data {

// SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, one 64-bit state word, trivially seedable.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0, without modulo bias: draws below 2^64 mod bound are rejected.
  uint64_t uniform_below(uint64_t bound) {
    const uint64_t reject_below = (0 - bound) % bound;
    while (true) {
      const uint64_t x = next();
      if (x >= reject_below) return x % bound;
    }
  }

 private:
  uint64_t state_;
};

// Derives independent streams (one per epoch, per purpose) from one user seed, so that epoch e's order
// does not depend on how many numbers earlier epochs drew.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  SplitMix64 mix(seed ^ (stream * 0xD1B54A32D192ED03ull));
  mix.next();
  return mix.next();
}

// Fisher-Yates, drawing from the end so the result depends only on the generator's sequence.
template <typename T>
void seeded_shuffle(std::span<T> items, SplitMix64& rng) {
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.uniform_below(i));
    std::swap(items[i - 1], items[j]);
  }
}

}  // namespace retort::data
