#pragma once
// What the CPU decode kernels (small_m_linear.cpp, gpt_decode_layers.cpp) share: the accumulator type of a storage
// dtype, the rounding a store to it applies, elements of vectors in another dtype, the dispatch on the storage dtype,
// and GELU's tanh approximation.
#include <cmath>
#include <type_traits>

#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace retort::kernels::cpu {
namespace decode_storage {

template <typename S>
using Acc = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <typename S>
Acc<S> widen_value(S v) {
  return static_cast<Acc<S>>(v);
}

// The value as a store of storage type S would keep it.
template <typename S>
Acc<S> stored(Acc<S> v) {
  if constexpr (std::is_same_v<S, BFloat16>)
    return static_cast<float>(BFloat16(v));
  else
    return static_cast<Acc<S>>(static_cast<S>(v));
}

template <typename S>
S narrow_value(Acc<S> v) {
  if constexpr (std::is_same_v<S, BFloat16>)
    return BFloat16(v);
  else
    return static_cast<S>(v);
}

// Element i of a vector that may be in another dtype than the rows (an f32 norm weight under bf16 rows).
inline double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32:
      return t.data<float>()[i];
    case DType::F64:
      return t.data<double>()[i];
    case DType::BF16:
      return static_cast<float>(t.data<BFloat16>()[i]);
    case DType::I32:
      break;
  }
  throw Error("decode kernels (CPU): a norm or bias vector must be floating-point");
}

template <typename Fn>
void with_storage(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn.template operator()<float>();
    case DType::F64:
      return fn.template operator()<double>();
    case DType::BF16:
      return fn.template operator()<BFloat16>();
    case DType::I32:
      break;
  }
  throw Error(fmt::format("{} (CPU): needs floating-point storage, got {}", op, dtype_name(dtype)));
}

template <typename A>
A gelu_tanh(A v) {
  const A c = static_cast<A>(0.7978845608028654), a = static_cast<A>(0.044715);
  return static_cast<A>(0.5) * v * (static_cast<A>(1) + std::tanh(c * (v + a * v * v * v)));
}

}  // namespace decode_storage
}  // namespace retort::kernels::cpu
