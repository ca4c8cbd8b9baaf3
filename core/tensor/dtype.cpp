#include "core/tensor/dtype.h"

#include "core/util/error.h"

namespace retort {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::F64:
      return "f64";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "i32" || name == "int32") return DType::I32;
  if (name == "f64" || name == "float64" || name == "double") return DType::F64;
  throw InputError(fmt::format("unknown dtype '{}': use f32, bf16, i32 or f64", name));
}

}  // namespace retort
