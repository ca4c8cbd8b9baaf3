#include "core/data/content_hash.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/util/error.h"

namespace retort::data {

void ContentHash::update(std::string_view bytes) {
  uint64_t h = state_;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  state_ = h;
}

std::string ContentHash::hex() const {
  return fmt::format("{:016x}", state_);
}

std::string content_hash_hex(std::string_view bytes) {
  ContentHash hash;
  hash.update(bytes);
  return hash.hex();
}

std::string file_content_hash_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read '{}': {}", path.string(), std::strerror(errno)));
  ContentHash hash;
  std::array<char, 1 << 16> chunk{};
  while (in) {
    in.read(chunk.data(), chunk.size());
    hash.update(std::string_view(chunk.data(), static_cast<size_t>(in.gcount())));
  }
  if (in.bad()) throw InputError(fmt::format("cannot read '{}': I/O error", path.string()));
  return hash.hex();
}

}  // namespace retort::data
