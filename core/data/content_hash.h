#pragma once
// A stable 64-bit content hash (FNV-1a) for cache keys: tokenizer fingerprints and corpus manifests. It
// detects changed inputs, not adversaries, and must give the same string on every machine and build.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace retort::data {

class ContentHash {
 public:
  void update(std::string_view bytes);
  uint64_t value() const { return state_; }
  // 16 lowercase hex digits.
  std::string hex() const;

 private:
  uint64_t state_ = 0xCBF29CE484222325ull;
};

std::string content_hash_hex(std::string_view bytes);

// Streams the file, so a large corpus file is never held whole; errors name the file.
std::string file_content_hash_hex(const std::filesystem::path& path);

}  // namespace retort::data
