// Token shards: the llm.c byte layout checked by reading raw bytes, and each corruption a reader must reject.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "core/data/token_shard.h"
#include "core/data/token_stats.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

::testing::AssertionResult contains_all(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    if (text.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << part << "' is missing from: " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

int32_t header_int(const std::string& bytes, int index) {
  int32_t value = 0;
  std::memcpy(&value, bytes.data() + 4 * index, 4);
  return value;
}

void set_header_int(const fs::path& path, int index, int32_t value) {
  std::string bytes = read_bytes(path);
  std::memcpy(bytes.data() + 4 * index, &value, 4);
  write_bytes(path, bytes);
}

std::vector<int32_t> pseudo_random_tokens(size_t count, int64_t vocab_size) {
  std::vector<int32_t> tokens(count);
  uint64_t x = 12345;
  for (auto& token : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    token = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab_size));
  }
  return tokens;
}

TEST(DataShard, Uint16RoundTripMatchesLlmcLayout) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  std::vector<int32_t> tokens = pseudo_random_tokens(5000, 65536);
  tokens[10] = 65535;  // the largest id that still fits uint16
  tokens[11] = 0;
  write_token_shard(path, tokens, 65536);

  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 2u * tokens.size());
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 1);
  EXPECT_EQ(header_int(bytes, 2), 5000);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header_int(bytes, i), 0) << "header int " << i;
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint16_t stored = 0;
    std::memcpy(&stored, bytes.data() + 1024 + 2 * i, 2);
    ASSERT_EQ(stored, tokens[i]) << "token " << i;
  }

  const TokenShard shard = TokenShard::open(path, 65536);
  EXPECT_EQ(shard.size(), 5000);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(shard.token_bytes(), 2);
  EXPECT_EQ(shard.token(10), 65535);
  EXPECT_EQ(shard.read(0, 5000), tokens);
  EXPECT_EQ(shard.read(4990, 10), std::vector<int32_t>(tokens.begin() + 4990, tokens.end()));
  // The write went through a temporary file that must be gone.
  EXPECT_EQ(std::distance(fs::directory_iterator(folder.path()), fs::directory_iterator()), 1);
}

TEST(DataShard, Uint32RoundTripAboveUint16Vocab) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  std::vector<int32_t> tokens = pseudo_random_tokens(3000, 100000);
  tokens[0] = 65536;
  tokens[1] = 99999;
  write_token_shard(path, tokens, 100000);

  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 4u * tokens.size());
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 2);
  EXPECT_EQ(header_int(bytes, 2), 3000);
  uint32_t second = 0;
  std::memcpy(&second, bytes.data() + 1024 + 4, 4);
  EXPECT_EQ(second, 99999u);

  const TokenShard shard = TokenShard::open(path, 100000);
  EXPECT_EQ(shard.version(), 2);
  EXPECT_EQ(shard.token_bytes(), 4);
  EXPECT_EQ(shard.token(0), 65536);
  EXPECT_EQ(shard.read(0, shard.size()), tokens);
}

TEST(DataShard, EmptyShardIsValid) {
  TempFolder folder;
  const fs::path path = folder.path() / "empty.bin";
  write_token_shard(path, std::vector<int32_t>{}, 100);
  EXPECT_EQ(fs::file_size(path), 1024u);
  EXPECT_EQ(TokenShard::open(path, 100).size(), 0);
}

TEST(DataShard, WidthFollowsVocabSize) {
  EXPECT_EQ(shard_token_bytes(8192), 2);
  EXPECT_EQ(shard_token_bytes(65536), 2);
  EXPECT_EQ(shard_token_bytes(65537), 4);
}

TEST(DataShard, WrongMagicIsAnError) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_token_shard(path, std::vector<int32_t>{1, 2, 3}, 10);
  set_header_int(path, 0, 12345);
  EXPECT_TRUE(
      contains_all(message_of([&] { TokenShard::open(path, 10); }), {path.string(), "magic", "12345", "20240520"}));
}

TEST(DataShard, UnknownVersionIsAnError) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_token_shard(path, std::vector<int32_t>{1, 2, 3}, 10);
  set_header_int(path, 1, 7);
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 10); }), {path.string(), "version 7"}));
}

TEST(DataShard, TruncatedFileSaysExpectedAndActualBytes) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_token_shard(path, std::vector<int32_t>(100, 5), 10);  // 1024 + 200 bytes
  fs::resize_file(path, 1024 + 197);
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 10); }),
                           {path.string(), "truncated", "expected 1224 bytes", "found 1221"}));
}

TEST(DataShard, FileShorterThanHeaderIsAnError) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_bytes(path, std::string(100, 'x'));
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 10); }), {path.string(), "100 bytes", "header"}));
}

TEST(DataShard, TrailingBytesAreAnError) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_token_shard(path, std::vector<int32_t>(100, 5), 10);
  std::ofstream(path, std::ios::binary | std::ios::app).write("abcd", 4);
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 10); }),
                           {path.string(), "4 trailing bytes", "expected 1224 bytes", "found 1228"}));
}

TEST(DataShard, TokenOutsideVocabNamesPositionAndValue) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  std::vector<int32_t> tokens(50, 3);
  tokens[17] = 999;
  tokens[30] = 998;
  write_token_shard(path, tokens, 1000);
  EXPECT_NO_THROW(TokenShard::open(path, 1000));
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 500); }),
                           {path.string(), "token id 999", "position 17", "500 ids", "another tokenizer"}));
}

TEST(DataShard, MissingFileIsAnInputError) {
  TempFolder folder;
  const fs::path path = folder.path() / "nope.bin";
  EXPECT_TRUE(contains_all(message_of([&] { TokenShard::open(path, 10); }), {path.string()}));
}

TEST(DataShard, WriterRejectsIdsOutsideVocab) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  EXPECT_TRUE(contains_all(message_of([&] {
                             write_token_shard(path, std::vector<int32_t>{1, 10, 2}, 10);
                           }),
                           {"token 10", "position 1"}));
  EXPECT_TRUE(contains_all(message_of([&] { write_token_shard(path, std::vector<int32_t>{-1}, 10); }),
                           {"token -1", "position 0"}));
  EXPECT_FALSE(fs::exists(path));
}

TEST(DataShard, MoveKeepsTheMapping) {
  TempFolder folder;
  const fs::path path = folder.path() / "s.bin";
  write_token_shard(path, std::vector<int32_t>{4, 5, 6}, 10);
  TokenShard first = TokenShard::open(path, 10);
  TokenShard second = std::move(first);
  std::vector<TokenShard> shards;
  shards.push_back(std::move(second));
  EXPECT_EQ(shards[0].read(0, 3), (std::vector<int32_t>{4, 5, 6}));
}

TEST(DataTokenStats, UnigramEntropyMatchesClosedForm) {
  // Uniform over 4 ids: ln 4.
  EXPECT_NEAR(unigram_entropy(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, 0}, 8), std::log(4.0), 1e-12);
  // p = (1/2, 1/4, 1/4): 1.5 ln 2.
  EXPECT_NEAR(unigram_entropy(std::vector<int32_t>{5, 5, 6, 7}, 8), 1.5 * std::log(2.0), 1e-12);
  EXPECT_EQ(unigram_entropy(std::vector<int32_t>{2, 2, 2}, 8), 0.0);
  EXPECT_EQ(unigram_entropy(std::vector<int32_t>{}, 8), 0.0);
  EXPECT_THROW(unigram_entropy(std::vector<int32_t>{8}, 8), InputError);
}

TEST(DataTokenStats, ShardCountsEqualStreamCounts) {
  TempFolder folder;
  const std::vector<int32_t> a = pseudo_random_tokens(3000, 50);
  const std::vector<int32_t> b = pseudo_random_tokens(1000, 50);
  write_token_shard(folder.path() / "a.bin", a, 50);
  write_token_shard(folder.path() / "b.bin", b, 50);
  std::vector<TokenShard> shards;
  shards.push_back(TokenShard::open(folder.path() / "a.bin", 50));
  shards.push_back(TokenShard::open(folder.path() / "b.bin", 50));
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  EXPECT_EQ(unigram_counts(shards, 50), unigram_counts(all, 50));
}

}  // namespace
}  // namespace retort::data
