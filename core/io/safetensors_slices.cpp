#include "core/io/safetensors_slices.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/io/safetensors.h"
#include "core/util/error.h"

namespace retort {
namespace {

float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Converts `count` stored elements starting at `source` into float32.
void convert(const SafetensorsTensorInfo& info, const unsigned char* source, int64_t count, float* out) {
  if (info.stored_f16) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, source + 2 * i, 2);
      out[i] = f16_bits_to_float(bits);
    }
  } else if (info.dtype == DType::BF16) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, source + 2 * i, 2);
      out[i] = bits_to_float(static_cast<uint32_t>(bits) << 16);
    }
  } else {
    std::memcpy(out, source, static_cast<size_t>(count) * sizeof(float));
  }
}

}  // namespace

float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);
  // Subnormal: shift the mantissa up until its leading one becomes the implicit bit.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  return bits_to_float(sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13));
}

SafetensorsSliceReader::SafetensorsSliceReader(const std::filesystem::path& path)
    : path_(path), header_(read_safetensors_header(path)) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("cannot open safetensors file '{}': {}", path.string(), strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw InputError(fmt::format("cannot read safetensors file '{}': {}", path.string(), strerror(errno)));
  }
  mapped_size_ = static_cast<uint64_t>(info.st_size);
  RETORT_INPUT_CHECK(mapped_size_ >= header_.data_start + header_.data_size,
                     "safetensors file '{}' changed size while it was being opened ({} bytes, its header needs {})",
                     path.string(), mapped_size_, header_.data_start + header_.data_size);
  void* mapped = ::mmap(nullptr, mapped_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED)
    throw InputError(fmt::format("cannot map safetensors file '{}': {}", path.string(), strerror(errno)));
  mapped_ = static_cast<const unsigned char*>(mapped);
}

SafetensorsSliceReader::~SafetensorsSliceReader() {
  if (mapped_) ::munmap(const_cast<unsigned char*>(mapped_), mapped_size_);
}

const SafetensorsTensorInfo* SafetensorsSliceReader::find(const std::string& name) const {
  for (const SafetensorsTensorInfo& info : header_.tensors)
    if (info.name == name) return &info;
  return nullptr;
}

Tensor SafetensorsSliceReader::read_f32(const std::string& name) const {
  const SafetensorsTensorInfo* info = find(name);
  RETORT_INPUT_CHECK(info != nullptr, "safetensors file '{}' has no tensor '{}'", path_.string(), name);
  if (info->shape.empty()) return read_f32(name, 0, 0, 0);
  return read_f32(name, 0, 0, info->shape[0]);
}

Tensor SafetensorsSliceReader::read_f32(const std::string& name, int dim, int64_t start, int64_t length) const {
  const SafetensorsTensorInfo* info = find(name);
  RETORT_INPUT_CHECK(info != nullptr, "safetensors file '{}' has no tensor '{}'", path_.string(), name);
  RETORT_INPUT_CHECK(info->stored_f16 || info->dtype == DType::F32 || info->dtype == DType::BF16,
                     "tensor '{}' of safetensors file '{}' is {}: only F32, BF16 and F16 weights can be read", name,
                     path_.string(), safetensors_dtype_name(info->dtype));
  const Shape& shape = info->shape;
  const uint64_t element = stored_element_size(*info);
  const unsigned char* base = mapped_ + header_.data_start + info->begin;
  if (shape.empty()) {  // a scalar
    Tensor out = Tensor::empty({}, DType::F32, Device::cpu());
    convert(*info, base, 1, static_cast<float*>(out.raw_data()));
    return out;
  }
  const int ndim = static_cast<int>(shape.size());
  RETORT_INPUT_CHECK(dim >= 0 && dim < ndim && start >= 0 && length >= 0 && start + length <= shape[dim],
                     "cannot read elements [{}, {}) of dim {} of tensor '{}' {} in '{}': the range is outside its "
                     "shape",
                     start, start + length, dim, name, fmt::join(shape, "x"), path_.string());
  // A slice along dim is `outer` runs of `length * inner` elements, `shape[dim] * inner` apart.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (int d = dim + 1; d < ndim; ++d) inner *= shape[d];
  Shape out_shape = shape;
  out_shape[dim] = length;
  Tensor out = Tensor::empty(out_shape, DType::F32, Device::cpu());
  float* destination = static_cast<float*>(out.raw_data());
  const int64_t run = length * inner;
  for (int64_t o = 0; o < outer; ++o) {
    const unsigned char* source = base + static_cast<uint64_t>((o * shape[dim] + start) * inner) * element;
    convert(*info, source, run, destination + o * run);
  }
  return out;
}

}  // namespace retort
