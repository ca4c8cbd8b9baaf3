// The top-k cache format: a written cache reads back equal through the memory map (f32 exactly, bf16 as the
// rounded values), across shard borders; the bytes sit where topk_cache.h says; an interrupted writer resumes
// to byte-identical files; truncated, corrupt, incomplete and mismatched caches are errors that name the file
// and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "distill/cache/topk_cache.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

struct Rows {
  std::vector<int32_t> indices;
  std::vector<float> logprobs, lse;
};

Rows random_rows(int64_t n, int k, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::uniform_real_distribution<float> lp(-20.f, 0.f);
  Rows r;
  for (int64_t i = 0; i < n * k; ++i) r.indices.push_back(id(gen)), r.logprobs.push_back(lp(gen));
  for (int64_t i = 0; i < n; ++i) r.lse.push_back(lp(gen) + 30.f);
  return r;
}

TopKCacheSpec make_spec(CacheValueType type, int k = 6) {
  TopKCacheSpec spec;
  spec.k = k;
  spec.vocab = 1000;
  spec.value_type = type;
  spec.tokenizer_id = "spm-8192-0123456789abcdef";
  spec.dataset = {25, 0x1234567890abcdefull};
  spec.cache_tokens = 23;
  spec.shard_tokens = 7;  // shards of 7, 7, 7 and 2 rows
  return spec;
}

// Appends rows [from, to) of `rows` in uneven pieces.
void append_range(TopKCacheWriter& writer, const Rows& rows, int64_t from, int64_t to, int k) {
  const int64_t pieces[] = {5, 9, 1, 8, 3};
  int64_t p = from;
  for (int i = 0; p < to; ++i) {
    const int64_t n = std::min(pieces[i % 5], to - p);
    writer.append(p, n, std::span(rows.indices).subspan(static_cast<size_t>(p * k), static_cast<size_t>(n * k)),
                  std::span(rows.logprobs).subspan(static_cast<size_t>(p * k), static_cast<size_t>(n * k)),
                  std::span(rows.lse).subspan(static_cast<size_t>(p), static_cast<size_t>(n)));
    p += n;
  }
}

void write_cache(const fs::path& dir, const TopKCacheSpec& spec, const Rows& rows) {
  TopKCacheWriter writer(dir, spec);
  append_range(writer, rows, 0, spec.cache_tokens, spec.k);
  ASSERT_TRUE(writer.complete());
}

std::vector<float> stored(const std::vector<float>& values, CacheValueType type) {
  if (type == CacheValueType::F32) return values;
  return Tensor::from_floats(values, {static_cast<int64_t>(values.size())}, DType::BF16).to_floats();
}

TEST(TopKCache, RoundTripThroughTheMemoryMap) {
  for (CacheValueType type : {CacheValueType::F32, CacheValueType::BF16}) {
    testing::TempFolder folder;
    const TopKCacheSpec spec = make_spec(type);
    const Rows rows = random_rows(spec.cache_tokens, spec.k, spec.vocab, 1);
    write_cache(folder.path(), spec, rows);
    EXPECT_EQ(fs::file_size(folder.path() / "topk_00003.bin"),
              static_cast<uintmax_t>(256 + 2 * (spec.k * (4 + (type == CacheValueType::F32 ? 4 : 2)) + 4)));
    const TopKCacheReader reader =
        TopKCacheReader::open(folder.path(), {.k = spec.k, .tokenizer_id = spec.tokenizer_id, .dataset = spec.dataset});
    EXPECT_EQ(reader.tokens(), 23);
    const std::vector<float> want_logprobs = stored(rows.logprobs, type);
    for (auto [start, count] : {std::pair<int64_t, int64_t>{0, 23}, {5, 10}, {21, 2}, {7, 0}}) {
      const TopKRows got = reader.rows(start, count);
      ASSERT_EQ(got.indices.shape(), Shape({count, spec.k}));
      const std::vector<int32_t> indices = got.indices.to_ints();
      const std::vector<float> logprobs = got.logprobs.to_floats(), lse = got.lse.to_floats();
      for (int64_t i = 0; i < count * spec.k; ++i) {
        ASSERT_EQ(indices[i], rows.indices[start * spec.k + i]);
        ASSERT_EQ(logprobs[i], want_logprobs[start * spec.k + i]);
      }
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(lse[i], rows.lse[start + i]);
    }
  }
}

// The documented byte layout, read with plain memcpy from the file's bytes.
TEST(TopKCache, BytesFollowTheDocumentedLayout) {
  testing::TempFolder folder;
  const TopKCacheSpec spec = make_spec(CacheValueType::F32);
  const Rows rows = random_rows(spec.cache_tokens, spec.k, spec.vocab, 2);
  write_cache(folder.path(), spec, rows);
  const std::string bytes = testing::read_bytes(folder.path() / "topk_00001.bin");
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, bytes.data() + at, 8);
    return v;
  };
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  EXPECT_EQ(bytes.substr(0, 8), std::string("RTTOPKC\0", 8));
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(16), 6u);
  EXPECT_EQ(u32(20), 1u);
  EXPECT_EQ(u64(24), 1000u);
  EXPECT_EQ(u64(32), 1u);
  EXPECT_EQ(u64(40), 7u);
  EXPECT_EQ(u64(48), 7u);
  EXPECT_EQ(u64(56), 23u);
  EXPECT_EQ(u64(72), 25u);
  EXPECT_EQ(u64(80), 0x1234567890abcdefull);
  EXPECT_EQ(bytes.substr(100, u32(96)), spec.tokenizer_id);
  // Record 0 of shard 1 is position 7: indices, then log-probs, then lse.
  const size_t record = 256;
  int32_t first_index;
  float first_logprob, lse;
  std::memcpy(&first_index, bytes.data() + record, 4);
  std::memcpy(&first_logprob, bytes.data() + record + 4 * 6, 4);
  std::memcpy(&lse, bytes.data() + record + 8 * 6, 4);
  EXPECT_EQ(first_index, rows.indices[7 * 6]);
  EXPECT_EQ(first_logprob, rows.logprobs[7 * 6]);
  EXPECT_EQ(lse, rows.lse[7]);
  EXPECT_EQ(bytes.size(), 256u + 7u * (6 * 8 + 4));
}

TEST(TopKCache, AnInterruptedWriterResumesToTheSameBytes) {
  for (CacheValueType type : {CacheValueType::F32, CacheValueType::BF16}) {
    testing::TempFolder whole("topk_cache_whole"), resumed("topk_cache_resumed");
    const TopKCacheSpec spec = make_spec(type);
    const Rows rows = random_rows(spec.cache_tokens, spec.k, spec.vocab, 3);
    write_cache(whole.path(), spec, rows);
    {
      TopKCacheWriter first(resumed.path(), spec);
      append_range(first, rows, 0, 16, spec.k);  // shards 0 and 1 complete, two rows of shard 2 in memory
      EXPECT_EQ(first.next_token(), 14);
    }  // interrupted: the buffered rows are lost
    EXPECT_FALSE(fs::exists(resumed.path() / "topk_00002.bin"));
    TopKCacheWriter second(resumed.path(), spec);
    EXPECT_EQ(second.resumed_tokens(), 14);
    append_range(second, rows, 8, spec.cache_tokens, spec.k);  // a window that starts before the resume point
    EXPECT_TRUE(second.complete());
    for (int i = 0; i < 4; ++i) {
      const std::string name = topk_shard_file_name(i);
      EXPECT_EQ(testing::read_bytes(resumed.path() / name), testing::read_bytes(whole.path() / name)) << name;
    }
  }
}

TEST(TopKCache, ResumingWithOtherSettingsIsAnError) {
  testing::TempFolder folder;
  const TopKCacheSpec spec = make_spec(CacheValueType::BF16);
  write_cache(folder.path(), spec, random_rows(spec.cache_tokens, spec.k, spec.vocab, 4));
  TopKCacheSpec other = spec;
  other.k = 5;
  const std::string message = testing::message_of([&] { TopKCacheWriter(folder.path(), other); });
  EXPECT_NE(message.find("topk_00000.bin' belongs to a different cache (k: 6 vs 5)"), std::string::npos) << message;
  EXPECT_NE(message.find("write to another folder"), std::string::npos) << message;
}

class BrokenCache : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = make_spec(CacheValueType::BF16);
    write_cache(folder_.path(), spec_, random_rows(spec_.cache_tokens, spec_.k, spec_.vocab, 5));
  }
  static TopKCacheExpectation expecting_k(int k) {
    TopKCacheExpectation e;
    e.k = k;
    return e;
  }
  static TopKCacheExpectation expecting_tokenizer(const std::string& id) {
    TopKCacheExpectation e;
    e.tokenizer_id = id;
    return e;
  }
  static TopKCacheExpectation expecting_dataset(DatasetIdentity dataset) {
    TopKCacheExpectation e;
    e.dataset = dataset;
    return e;
  }
  std::string open_error(const TopKCacheExpectation& expect = {}) {
    return testing::message_of([&] { TopKCacheReader::open(folder_.path(), expect); });
  }
  fs::path shard(int i) const { return folder_.path() / topk_shard_file_name(i); }
  void flip_byte(const fs::path& path, size_t at) {
    std::string bytes = testing::read_bytes(path);
    bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    testing::write_bytes(path, bytes);
  }

  testing::TempFolder folder_;
  TopKCacheSpec spec_;
};

TEST_F(BrokenCache, TruncatedShard) {
  std::string bytes = testing::read_bytes(shard(1));
  testing::write_bytes(shard(1), bytes.substr(0, bytes.size() - 3));
  const std::string message = open_error();
  EXPECT_NE(message.find("topk_00001.bin' is"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  fs::remove(shard(1));
  fs::copy_file(shard(0), shard(1));
  EXPECT_NE(open_error().find("says it is shard 0"), std::string::npos);
}

TEST_F(BrokenCache, HeaderShorterThanItself) {
  testing::write_bytes(shard(0), testing::read_bytes(shard(0)).substr(0, 100));
  EXPECT_NE(open_error().find("shorter than its 256-byte header"), std::string::npos);
}

TEST_F(BrokenCache, CorruptPayload) {
  flip_byte(shard(2), 300);
  const std::string message = open_error();
  EXPECT_NE(message.find("topk_00002.bin' is corrupt: the checksum of its rows"), std::string::npos) << message;
}

TEST_F(BrokenCache, CorruptHeader) {
  flip_byte(shard(3), 50);
  EXPECT_NE(open_error().find("topk_00003.bin' has a corrupt header"), std::string::npos);
}

TEST_F(BrokenCache, MissingShard) {
  fs::remove(shard(2));
  const std::string message = open_error();
  EXPECT_NE(message.find("is incomplete: topk_00002.bin is missing (rows [14, 21) of 23)"), std::string::npos)
      << message;
  fs::remove(shard(0));
  EXPECT_NE(open_error().find("no top-k cache in"), std::string::npos);
}

TEST_F(BrokenCache, MismatchedExpectations) {
  EXPECT_NE(open_error(expecting_k(8)).find("holds k = 6 entries per token, the run asks for k = 8"),
            std::string::npos);
  EXPECT_NE(open_error(expecting_tokenizer("other")).find("made with tokenizer 'spm-8192"), std::string::npos);
  EXPECT_NE(open_error(expecting_dataset({25, 1})).find("made from a dataset of 25 tokens"), std::string::npos);
  EXPECT_NE(open_error(expecting_dataset({26, spec_.dataset.hash})).find("this dataset has 26 tokens"),
            std::string::npos);
  const TopKCacheReader reader = TopKCacheReader::open(folder_.path());
  EXPECT_NE(testing::message_of([&] { reader.rows(20, 4); }).find("rows [20, 24) are outside its 23 positions"),
            std::string::npos);
}

TEST(TopKCache, DatasetIdentityHashesTheTokens) {
  const std::vector<int32_t> a{1, 2, 3, 4}, b{1, 2, 4, 3};
  EXPECT_EQ(dataset_identity(a).tokens, 4);
  EXPECT_NE(dataset_identity(a).hash, dataset_identity(b).hash);
  DatasetHasher pieces;
  pieces.update(std::span(a).subspan(0, 1));
  pieces.update(std::span(a).subspan(1));
  EXPECT_EQ(pieces.identity(), dataset_identity(a));
}

}  // namespace
}  // namespace retort::distill
