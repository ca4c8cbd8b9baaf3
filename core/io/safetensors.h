#pragma once
// Reading and writing tensors in the safetensors format (Hugging Face), interchangeable with the Python
// `safetensors` package. Files are written atomically; reading validates the whole layout first, so a
// corrupt or truncated file is an InputError naming the file, never garbage tensors.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/io/safetensors_header.h"
#include "core/tensor/tensor.h"

namespace retort {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  std::filesystem::path path;
  NamedTensors tensors;  // CPU tensors, in the order the header lists them
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // The tensor called `name`; InputError naming the file (and the closest existing name) when absent.
  const Tensor& get(const std::string& name) const;
};

// Tensors may live on any device (GPU tensors are copied to the host one at a time). Names must be unique,
// non-empty and not "__metadata__". The data buffer holds the tensors in the given order.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

SafetensorsFile load_safetensors(const std::filesystem::path& path);

// Only the header (names, dtypes, shapes, offsets, metadata), validated against the file's size.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

}  // namespace retort
