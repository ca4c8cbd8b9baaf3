#pragma once
// Reading parts of the tensors of a safetensors file without reading the rest: the file is memory-mapped and
// only the bytes of the requested rows (or of the requested columns of each row) are touched. A tensor-parallel
// rank loading a large checkpoint reads its own shard, never the whole file.
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/io/safetensors_header.h"
#include "core/tensor/tensor.h"

namespace retort {

// IEEE half precision bits to float (every value exact, subnormals, infinities and NaN included).
float f16_bits_to_float(uint16_t bits);

class SafetensorsSliceReader {
 public:
  // Reads and validates the header (an InputError naming the file when it is corrupt), then maps the file.
  explicit SafetensorsSliceReader(const std::filesystem::path& path);
  ~SafetensorsSliceReader();
  SafetensorsSliceReader(const SafetensorsSliceReader&) = delete;
  SafetensorsSliceReader& operator=(const SafetensorsSliceReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The tensor's entry, or null when the file has no tensor of that name.
  const SafetensorsTensorInfo* find(const std::string& name) const;

  // Elements [start, start + length) along `dim` of tensor `name` (every other dim whole), as a float32 CPU
  // tensor converted from the stored F32, BF16 or F16. An InputError names the tensor when it is absent, has
  // another dtype, or the range does not fit its shape.
  Tensor read_f32(const std::string& name, int dim, int64_t start, int64_t length) const;
  // The whole tensor, converted the same way.
  Tensor read_f32(const std::string& name) const;

 private:
  std::filesystem::path path_;
  SafetensorsHeader header_;
  const unsigned char* mapped_ = nullptr;
  uint64_t mapped_size_ = 0;
};

}  // namespace retort
