#pragma once
// Token shards in llm.c's layout, so files are interchangeable with llm.c's data scripts:
//   header: 256 little-endian int32: [0] = 20240520 (magic), [1] = version, [2] = token count, rest 0;
//   body:   `count` tokens, little-endian.
// Version 1 (llm.c's GPT-2 shards) stores uint16 tokens; retort adds version 2 for uint32 tokens, used when the
// vocabulary has more than 65536 ids. The reader also takes llm.c's uint32 shards (magic 20240801, version 7, for
// Llama 3's ids). A reader rejects anything else, and a shard whose ids do not fit the vocabulary in use,
// instead of silently training on the wrong ids.
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace retort::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersionUint16 = 1;
inline constexpr int32_t kShardVersionUint32 = 2;
inline constexpr int32_t kLlmcUint32ShardMagic = 20240801;
inline constexpr int32_t kLlmcUint32ShardVersion = 7;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// Bytes per stored token for a vocabulary: 2 when every id fits uint16 (vocab_size <= 65536), else 4.
int shard_token_bytes(int64_t vocab_size);

// Writes atomically (temporary file + rename). Every token must be in [0, vocab_size) (an InputError
// naming the position otherwise), and a shard holds at most 2^31 - 1 tokens (the header's count is int32).
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab_size);

// A read-only memory map of one shard, validated on open: header size, magic, version, exact file size,
// and every token id < vocab_size. Errors name the file and what to do.
class TokenShard {
 public:
  static TokenShard open(const std::filesystem::path& path, int64_t vocab_size);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  int64_t size() const { return count_; }
  int32_t token(int64_t index) const;
  // Tokens [begin, begin + out.size()) widened to int32; the range must lie inside the shard.
  void copy_to(int64_t begin, std::span<int32_t> out) const;
  std::vector<int32_t> read(int64_t begin, int64_t count) const;

  int version() const { return version_; }
  int token_bytes() const { return version_ == kShardVersionUint16 ? 2 : 4; }
  const std::filesystem::path& path() const { return path_; }

 private:
  TokenShard() = default;
  void release();

  std::filesystem::path path_;
  const unsigned char* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  int64_t count_ = 0;
  int version_ = 0;
};

}  // namespace retort::data
