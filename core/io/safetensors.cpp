#include "core/io/safetensors.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "core/io/atomic_file.h"
#include "core/io/safetensors_slices.h"
#include "core/util/error.h"
#include "core/util/suggest.h"

namespace retort {
namespace {

// The file stays open between reading the header and the tensors, so both see the same file.
struct OpenedFile {
  std::ifstream stream;
  SafetensorsHeader header;
};

[[noreturn]] void truncated(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("safetensors file '{}': {}; the file is corrupt or truncated", file, what));
}

void read_exactly(std::ifstream& stream, uint64_t offset, void* destination, uint64_t size, const std::string& file,
                  const std::string& what) {
  stream.seekg(static_cast<std::streamoff>(offset));
  stream.read(static_cast<char*>(destination), static_cast<std::streamsize>(size));
  if (!stream || static_cast<uint64_t>(stream.gcount()) != size) {
    truncated(file, fmt::format("could not read {} ({} bytes at offset {})", what, size, offset));
  }
}

OpenedFile open_and_read_header(const std::filesystem::path& path) {
  const std::string file = path.string();
  OpenedFile opened;
  std::error_code error;
  const uint64_t file_size = std::filesystem::file_size(path, error);
  if (error) throw InputError(fmt::format("cannot read safetensors file '{}': {}", file, error.message()));
  opened.stream.open(path, std::ios::binary);
  if (!opened.stream) throw InputError(fmt::format("cannot open safetensors file '{}'", file));

  if (file_size < 8) {
    truncated(file, fmt::format("it is {} bytes long, shorter than the 8-byte header length that starts the format",
                                file_size));
  }
  unsigned char length_bytes[8];
  read_exactly(opened.stream, 0, length_bytes, 8, file, "the header length");
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | length_bytes[i];
  // The reference implementation refuses headers over 100 MB; a length beyond that is a corrupt file, and
  // believing it would allocate that much before finding out.
  constexpr uint64_t kMaxHeaderLength = 100'000'000;
  if (header_length > kMaxHeaderLength) {
    truncated(file, fmt::format("the header length is {} bytes, more than the format's limit of {}", header_length,
                                kMaxHeaderLength));
  }
  if (header_length > file_size - 8) {
    truncated(file,
              fmt::format("the header length is {} bytes but only {} bytes follow it", header_length, file_size - 8));
  }
  std::string json(header_length, '\0');
  read_exactly(opened.stream, 8, json.data(), header_length, file, "the header");
  opened.header = decode_safetensors_header(json, file_size - 8 - header_length, file);
  opened.header.data_start = 8 + header_length;
  return opened;
}

}  // namespace

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [tensor_name, tensor] : tensors) {
    if (tensor_name == name) return tensor;
    names.push_back(tensor_name);
  }
  throw InputError(
      fmt::format("safetensors file '{}' has no tensor '{}'{}", path.string(), name, did_you_mean(name, names)));
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensorInfo> infos;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    RETORT_CHECK(!name.empty() && name != "__metadata__", "cannot save a tensor named '{}' to '{}'", name,
                 path.string());
    RETORT_CHECK(names.insert(name).second, "tensor name '{}' appears twice in the tensors saved to '{}'", name,
                 path.string());
    RETORT_CHECK(tensor.defined(), "tensor '{}' saved to '{}' is undefined", name, path.string());
    const uint64_t size = tensor.nbytes();
    infos.push_back({name, tensor.dtype(), tensor.shape(), offset, offset + size});
    offset += size;
  }
  const std::string header = encode_safetensors_header(infos, metadata);
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, tensor] : tensors) {
      if (tensor.nbytes() == 0) continue;
      const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
      out.write(static_cast<const char*>(host.raw_data()), static_cast<std::streamsize>(host.nbytes()));
    }
  });
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  return open_and_read_header(path).header;
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  OpenedFile opened = open_and_read_header(path);
  SafetensorsFile result;
  result.path = path;
  result.metadata = std::move(opened.header.metadata);
  for (const SafetensorsTensorInfo& info : opened.header.tensors) {
    Tensor tensor = Tensor::empty(info.shape, info.dtype, Device::cpu());
    if (info.end > info.begin && info.stored_f16) {
      std::vector<uint16_t> halves((info.end - info.begin) / 2);
      read_exactly(opened.stream, opened.header.data_start + info.begin, halves.data(), info.end - info.begin,
                   path.string(), fmt::format("tensor '{}'", info.name));
      float* out = static_cast<float*>(tensor.raw_data());
      for (size_t i = 0; i < halves.size(); ++i) out[i] = f16_bits_to_float(halves[i]);
    } else if (info.end > info.begin) {
      read_exactly(opened.stream, opened.header.data_start + info.begin, tensor.raw_data(), info.end - info.begin,
                   path.string(), fmt::format("tensor '{}'", info.name));
    }
    result.tensors.emplace_back(info.name, std::move(tensor));
  }
  return result;
}

}  // namespace retort
