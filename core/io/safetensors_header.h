#pragma once
// The JSON header of a safetensors file (the Hugging Face format): encoding it for a writer, and decoding
// plus validating it for a reader. Layout of a file: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}, then the
// data buffer; offsets count from the start of the buffer.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {

struct SafetensorsTensorInfo {
  std::string name;
  // The dtype retort reads the tensor as. Half precision ("F16", which retort has no dtype for) reads as F32:
  // `stored_f16` is then set, and every element is 2 bytes in the file.
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data buffer
  uint64_t end = 0;
  bool stored_f16 = false;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // in the order the header lists them
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data buffer: 8 + header length
  uint64_t data_size = 0;
};

// "F32" | "BF16" | "I32" | "F64": the format's names for the dtypes retort stores.
std::string_view safetensors_dtype_name(DType dtype);

// Bytes per element as stored in the file (2 for F16, else the dtype's size).
size_t stored_element_size(const SafetensorsTensorInfo& info);

// The 8 length bytes followed by the JSON, padded with spaces so the data buffer starts 8-byte aligned.
// Offsets in `tensors` must already be assigned.
std::string encode_safetensors_header(const std::vector<SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata);

// Parses and validates the JSON of a file whose data buffer holds `data_size` bytes. Every tensor's
// offsets must match its shape and dtype, lie inside the buffer and not overlap another tensor, and the
// tensors must cover the buffer exactly (no gaps, no trailing bytes). `file` only names the file in
// messages; every failure is an InputError.
SafetensorsHeader decode_safetensors_header(std::string_view json, uint64_t data_size, const std::string& file);

}  // namespace retort
