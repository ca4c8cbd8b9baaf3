#include "core/tensor/random.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace retort {

namespace {

// A 64-bit finaliser (SplitMix64's): consecutive counters map to well-mixed outputs.
uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: never 0, so log() in Box-Muller stays finite.
double unit_uniform(uint64_t key, uint64_t counter) {
  const uint64_t bits = mix64(key ^ mix64(counter));
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

Tensor randn(const Shape& shape, double std, uint64_t seed, uint64_t stream, DType dtype, Device device) {
  const int64_t n = shape_numel(shape);
  const uint64_t key = mix64(seed ^ mix64(stream));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = unit_uniform(key, 2 * static_cast<uint64_t>(i));
    const double u2 = unit_uniform(key, 2 * static_cast<uint64_t>(i) + 1);
    values[i] = std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return Tensor::from_doubles(values, shape, dtype, device);
}

Tensor rand_uniform(const Shape& shape, double low, double high, uint64_t seed, uint64_t stream, DType dtype,
                    Device device) {
  const int64_t n = shape_numel(shape);
  const uint64_t key = mix64(seed ^ mix64(stream));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = low + (high - low) * (1.0 - unit_uniform(key, i));
  return Tensor::from_doubles(values, shape, dtype, device);
}

}  // namespace retort
