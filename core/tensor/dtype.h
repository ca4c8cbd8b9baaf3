#pragma once
// Element types. Storage may be bf16; arithmetic is always at least float32.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace retort {

enum class DType : uint8_t { F32, BF16, I32, F64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::F64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t != DType::I32;
}

std::string_view dtype_name(DType t);
DType dtype_from_name(std::string_view name);  // "f32" | "float32" | "bf16" | "bfloat16" | "i32" | "f64"

// Host-side bfloat16: the upper 16 bits of an IEEE float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x0040u);
      return;
    }
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>((u + rounding) >> 16);
  }
  explicit operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
static_assert(sizeof(BFloat16) == 2);

}  // namespace retort
