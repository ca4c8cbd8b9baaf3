#include "core/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <ostream>
#include <utility>

#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;

// The format is little-endian and tokens are read by memcpy; a big-endian host would need byte swaps.
static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

namespace {

template <typename Stored>
void widen(const unsigned char* body, int64_t begin, std::span<int32_t> out) {
  const unsigned char* source = body + begin * static_cast<int64_t>(sizeof(Stored));
  for (size_t i = 0; i < out.size(); ++i) {
    Stored value;
    std::memcpy(&value, source + i * sizeof(Stored), sizeof(Stored));
    out[i] = static_cast<int32_t>(value);
  }
}

template <typename Stored>
void write_tokens(std::ostream& out, std::span<const int32_t> tokens) {
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<Stored> buffer;
  buffer.reserve(std::min(kChunk, tokens.size()));
  for (size_t start = 0; start < tokens.size(); start += kChunk) {
    const size_t count = std::min(kChunk, tokens.size() - start);
    buffer.assign(tokens.begin() + start, tokens.begin() + start + count);
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(count * sizeof(Stored)));
  }
}

template <typename Stored>
void check_ids_below(const unsigned char* body, int64_t count, int64_t vocab_size, const fs::path& path) {
  for (int64_t i = 0; i < count; ++i) {
    Stored value;
    std::memcpy(&value, body + i * static_cast<int64_t>(sizeof(Stored)), sizeof(Stored));
    if (static_cast<int64_t>(value) >= vocab_size) [[unlikely]] {
      throw InputError(fmt::format(
          "token shard '{}' holds token id {} at position {}, but the vocabulary has only {} ids (0..{}): the shard "
          "was made with another tokenizer or a larger vocabulary. Prepare the data again with this tokenizer, use "
          "the tokenizer that made the shard, or (for pre-tokenized shards) set data.vocab_size above the largest id",
          path.string(), static_cast<int64_t>(value), i, vocab_size, vocab_size - 1));
    }
  }
}

}  // namespace

int shard_token_bytes(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

void write_token_shard(const fs::path& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  RETORT_INPUT_CHECK(vocab_size > 0 && vocab_size <= int64_t{std::numeric_limits<int32_t>::max()} + 1,
                     "cannot write token shard '{}': vocab size {} is not in 1..2^31", path.string(), vocab_size);
  RETORT_INPUT_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                     "cannot write token shard '{}': {} tokens exceed the format's int32 count; use smaller shards",
                     path.string(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    RETORT_INPUT_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size,
                       "cannot write token shard '{}': token {} at position {} is outside the vocabulary 0..{}",
                       path.string(), tokens[i], i, vocab_size - 1);
  }
  const bool narrow = shard_token_bytes(vocab_size) == 2;
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = narrow ? kShardVersionUint16 : kShardVersionUint32;
  header[2] = static_cast<int32_t>(tokens.size());
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
    if (narrow) {
      write_tokens<uint16_t>(out, tokens);
    } else {
      write_tokens<uint32_t>(out, tokens);
    }
  });
}

TokenShard TokenShard::open(const fs::path& path, int64_t vocab_size) {
  RETORT_INPUT_CHECK(vocab_size > 0, "cannot open token shard '{}': vocab size {} must be positive", path.string(),
                     vocab_size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(fmt::format("cannot open token shard '{}': {}{}", path.string(), std::strerror(errno),
                                 errno == ENOENT ? " (prepare the data first, or check the data folder)" : ""));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("token shard '{}' is not a regular file", path.string()));
  }
  const auto file_bytes = static_cast<int64_t>(info.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    throw InputError(
        fmt::format("token shard '{}' is {} bytes, shorter than the {}-byte header: the file is "
                    "truncated or not a token shard",
                    path.string(), file_bytes, kShardHeaderBytes));
  }
  void* mapping = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) {
    throw Error(fmt::format("cannot map token shard '{}': {}", path.string(), std::strerror(map_error)));
  }

  TokenShard shard;
  shard.path_ = path;
  shard.mapping_ = static_cast<const unsigned char*>(mapping);
  shard.mapping_bytes_ = static_cast<size_t>(file_bytes);
  // From here the shard owns the mapping, so a failed check below unmaps it.
  std::array<int32_t, 3> header{};
  std::memcpy(header.data(), shard.mapping_, sizeof(header));
  // llm.c's uint32 shards have a magic and version of their own; they read as retort's uint32 version.
  if (header[0] == kLlmcUint32ShardMagic && header[1] == kLlmcUint32ShardVersion) {
    header[0] = kShardMagic;
    header[1] = kShardVersionUint32;
  }
  RETORT_INPUT_CHECK(header[0] == kShardMagic,
                     "'{}' is not a token shard: its magic number is {}, expected {} (llm.c's layout)", path.string(),
                     header[0], kShardMagic);
  RETORT_INPUT_CHECK(
      header[1] == kShardVersionUint16 || header[1] == kShardVersionUint32,
      "token shard '{}' has unknown version {}: known are {} (uint16 tokens) and {} (uint32 tokens), and "
      "llm.c's version {} (uint32 tokens, magic {})",
      path.string(), header[1], kShardVersionUint16, kShardVersionUint32, kLlmcUint32ShardVersion,
      kLlmcUint32ShardMagic);
  RETORT_INPUT_CHECK(header[2] >= 0, "token shard '{}' has a negative token count {} in its header", path.string(),
                     header[2]);
  shard.version_ = header[1];
  shard.count_ = header[2];

  const int64_t expected_bytes = kShardHeaderBytes + shard.count_ * shard.token_bytes();
  RETORT_INPUT_CHECK(file_bytes >= expected_bytes,
                     "token shard '{}' is truncated: expected {} bytes (header {} + {} tokens x {} bytes), found {}. "
                     "Prepare the data again",
                     path.string(), expected_bytes, kShardHeaderBytes, shard.count_, shard.token_bytes(), file_bytes);
  RETORT_INPUT_CHECK(file_bytes == expected_bytes,
                     "token shard '{}' has {} trailing bytes: expected {} bytes (header {} + {} tokens x {} bytes), "
                     "found {}. The header's count does not match the file; prepare the data again",
                     path.string(), file_bytes - expected_bytes, expected_bytes, kShardHeaderBytes, shard.count_,
                     shard.token_bytes(), file_bytes);

  const unsigned char* body = shard.mapping_ + kShardHeaderBytes;
  if (shard.version_ == kShardVersionUint16) {
    check_ids_below<uint16_t>(body, shard.count_, vocab_size, path);
  } else {
    check_ids_below<uint32_t>(body, shard.count_, vocab_size, path);
  }
  return shard;
}

TokenShard::TokenShard(TokenShard&& other) noexcept {
  *this = std::move(other);
}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    count_ = std::exchange(other.count_, 0);
    version_ = std::exchange(other.version_, 0);
  }
  return *this;
}

TokenShard::~TokenShard() {
  release();
}

void TokenShard::release() {
  if (mapping_ != nullptr) ::munmap(const_cast<unsigned char*>(mapping_), mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
}

int32_t TokenShard::token(int64_t index) const {
  RETORT_CHECK(index >= 0 && index < count_, "token index {} is outside shard '{}' of {} tokens", index, path_.string(),
               count_);
  int32_t value = 0;
  copy_to(index, std::span<int32_t>(&value, 1));
  return value;
}

void TokenShard::copy_to(int64_t begin, std::span<int32_t> out) const {
  const auto count = static_cast<int64_t>(out.size());
  RETORT_CHECK(begin >= 0 && begin + count <= count_, "token range [{}, {}) is outside shard '{}' of {} tokens", begin,
               begin + count, path_.string(), count_);
  const unsigned char* body = mapping_ + kShardHeaderBytes;
  if (version_ == kShardVersionUint16) {
    widen<uint16_t>(body, begin, out);
  } else {
    widen<uint32_t>(body, begin, out);
  }
}

std::vector<int32_t> TokenShard::read(int64_t begin, int64_t count) const {
  RETORT_CHECK(count >= 0, "cannot read a negative number of tokens ({}) from shard '{}'", count, path_.string());
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  copy_to(begin, tokens);
  return tokens;
}

}  // namespace retort::data
