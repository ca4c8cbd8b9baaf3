// The sampled cache kind of the checksummed shard format (distill/cache/topk_cache.h): rows of ids, draw counts and
// importance log-ratios read back through the memory map (counts exactly, log-ratios as f32 or bf16-rounded), the
// version-2 header fields where the format says, a reader that refuses a cache of the other kind with a message
// naming distill.cache_kind, corruption of the payload or of the kind fields detected, and a resumed writer of
// another kind refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "distill/cache/cache_targets.h"
#include "distill/cache/topk_cache.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

constexpr int kDraws = 5;

struct Rows {
  std::vector<int32_t> indices;
  std::vector<uint16_t> counts;
  std::vector<float> log_ratios, lse;
};

// Rows of kDraws draws: distinct ids, counts that add up to kDraws (some 0: filler ids).
Rows random_rows(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> value(-3.f, 3.f);
  Rows r;
  for (int64_t row = 0; row < n; ++row) {
    std::vector<uint16_t> counts(kDraws, 0);
    for (int d = 0; d < kDraws; ++d) ++counts[gen() % kDraws];
    for (int i = 0; i < kDraws; ++i) {
      r.indices.push_back(static_cast<int32_t>(row * 7 + i * 3) % 1000);
      r.counts.push_back(counts[static_cast<size_t>(i)]);
      r.log_ratios.push_back(value(gen));
    }
    r.lse.push_back(value(gen) + 10.f);
  }
  return r;
}

TopKCacheSpec sampled_spec(CacheValueType type) {
  TopKCacheSpec spec;
  spec.kind = CacheKind::Sampled;
  spec.k = kDraws;
  spec.vocab = 1000;
  spec.value_type = type;
  spec.tokenizer_id = "spm-test";
  spec.dataset = {30, 0xfeedull};
  spec.cache_tokens = 17;
  spec.shard_tokens = 6;  // shards of 6, 6 and 5 rows
  spec.sample_temperature = 0.75;
  spec.sample_seed = 42;
  return spec;
}

void write_sampled(const fs::path& dir, const TopKCacheSpec& spec, const Rows& rows) {
  TopKCacheWriter writer(dir, spec);
  for (int64_t p = 0; p < spec.cache_tokens; p += 4) {  // uneven pieces across shard borders
    const int64_t n = std::min<int64_t>(4, spec.cache_tokens - p);
    const auto at = static_cast<size_t>(p * kDraws), len = static_cast<size_t>(n * kDraws);
    writer.append_sampled(p, n, std::span(rows.indices).subspan(at, len), std::span(rows.counts).subspan(at, len),
                          std::span(rows.log_ratios).subspan(at, len),
                          std::span(rows.lse).subspan(static_cast<size_t>(p), static_cast<size_t>(n)));
  }
  ASSERT_TRUE(writer.complete());
}

TEST(SampledCache, RoundTripThroughTheMemoryMap) {
  for (CacheValueType type : {CacheValueType::F32, CacheValueType::BF16}) {
    testing::TempFolder folder;
    const TopKCacheSpec spec = sampled_spec(type);
    const Rows rows = random_rows(spec.cache_tokens, 1);
    write_sampled(folder.path(), spec, rows);
    const int64_t e = type == CacheValueType::F32 ? 4 : 2;
    EXPECT_EQ(fs::file_size(folder.path() / "topk_00002.bin"),
              static_cast<uintmax_t>(256 + 5 * (kDraws * (6 + e) + 4)));
    const TopKCacheReader reader = TopKCacheReader::open(folder.path(), {.kind = CacheKind::Sampled, .k = kDraws});
    EXPECT_EQ(reader.spec().kind, CacheKind::Sampled);
    EXPECT_EQ(reader.spec().sample_temperature, 0.75);
    EXPECT_EQ(reader.spec().sample_seed, 42u);
    const SampledRows got = reader.sampled_rows(0, spec.cache_tokens);
    const std::vector<int32_t> indices = got.indices.to_ints(), counts = got.counts.to_ints();
    const std::vector<float> ratios = got.log_ratios.to_floats(), lse = got.lse.to_floats();
    const std::vector<float> want_ratios =
        type == CacheValueType::F32
            ? rows.log_ratios
            : Tensor::from_floats(rows.log_ratios, {static_cast<int64_t>(rows.log_ratios.size())}, DType::BF16)
                  .to_floats();
    for (size_t i = 0; i < rows.indices.size(); ++i) {
      ASSERT_EQ(indices[i], rows.indices[i]);
      ASSERT_EQ(counts[i], rows.counts[i]);
      ASSERT_EQ(ratios[i], want_ratios[i]);
    }
    for (size_t i = 0; i < rows.lse.size(); ++i) ASSERT_EQ(lse[i], rows.lse[i]);
  }
}

TEST(SampledCache, BytesFollowTheDocumentedLayout) {
  testing::TempFolder folder;
  const TopKCacheSpec spec = sampled_spec(CacheValueType::F32);
  const Rows rows = random_rows(spec.cache_tokens, 2);
  write_sampled(folder.path(), spec, rows);
  const std::string bytes = testing::read_bytes(folder.path() / "topk_00001.bin");
  auto get = [&]<typename T>(size_t at, T) {
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    return v;
  };
  EXPECT_EQ(get(8, uint32_t{}), 2u);    // format version 2
  EXPECT_EQ(get(16, uint32_t{}), 5u);   // K
  EXPECT_EQ(get(232, uint32_t{}), 2u);  // kind: sampled
  EXPECT_EQ(get(240, double{}), 0.75);
  EXPECT_EQ(get(248, uint64_t{}), 42u);
  // Record 0 of shard 1 is position 6: ids, u16 counts, f32 log-ratios, f32 lse.
  const size_t record = 256, at = 6 * kDraws;
  EXPECT_EQ(get(record, int32_t{}), rows.indices[at]);
  EXPECT_EQ(get(record + 4 * kDraws, uint16_t{}), rows.counts[at]);
  EXPECT_EQ(get(record + 6 * kDraws, float{}), rows.log_ratios[at]);
  EXPECT_EQ(get(record + 10 * kDraws, float{}), rows.lse[6]);
  EXPECT_EQ(bytes.size(), 256u + 6u * (kDraws * 10 + 4));
}

TEST(SampledCache, AReaderRefusesACacheOfTheOtherKind) {
  testing::TempFolder sampled("sampled_cache"), topk("topk_cache");
  write_sampled(sampled.path(), sampled_spec(CacheValueType::BF16), random_rows(17, 3));
  TopKCacheSpec topk_spec = sampled_spec(CacheValueType::BF16);
  topk_spec.kind = CacheKind::TopK;
  topk_spec.sample_temperature = 1.0;
  topk_spec.sample_seed = 0;
  {
    TopKCacheWriter writer(topk.path(), topk_spec);
    const Rows rows = random_rows(17, 4);
    writer.append(0, 17, rows.indices, std::vector<float>(rows.log_ratios), rows.lse);
  }
  std::string message = testing::message_of([&] { TopKCacheReader::open(sampled.path(), {.kind = CacheKind::TopK}); });
  EXPECT_NE(message.find("is a sampled cache"), std::string::npos) << message;
  EXPECT_NE(message.find("set distill.cache_kind=sampled"), std::string::npos) << message;
  message = testing::message_of([&] { TopKCacheReader::open(topk.path(), {.kind = CacheKind::Sampled}); });
  EXPECT_NE(message.find("is a topk cache"), std::string::npos) << message;
  EXPECT_NE(message.find("set distill.cache_kind=topk"), std::string::npos) << message;
  // Rows of the wrong kind are refused too, and a top-k cache still reads as version 1 without a kind field.
  const TopKCacheReader any = TopKCacheReader::open(sampled.path());
  EXPECT_NE(testing::message_of([&] { any.rows(0, 1); }).find("is a sampled cache, read here as a topk cache"),
            std::string::npos);
  const TopKCacheReader old = TopKCacheReader::open(topk.path(), {.kind = CacheKind::TopK});
  EXPECT_EQ(testing::read_bytes(topk.path() / "topk_00000.bin").substr(8, 1), std::string("\x01", 1));
  EXPECT_THROW(old.sampled_rows(0, 1), InputError);
  // A writer resuming the folder with the other kind.
  message = testing::message_of([&] { TopKCacheWriter(sampled.path(), topk_spec); });
  EXPECT_NE(message.find("belongs to a different cache (kind: sampled vs topk)"), std::string::npos) << message;
}

TEST(SampledCache, CorruptionIsDetected) {
  testing::TempFolder folder;
  write_sampled(folder.path(), sampled_spec(CacheValueType::BF16), random_rows(17, 5));
  const fs::path shard = folder.path() / "topk_00001.bin";
  const std::string good = testing::read_bytes(shard);
  for (size_t at : {size_t{300}, size_t{244}, size_t{252}}) {  // a count or log-ratio, the temperature, the seed
    std::string bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x21);
    testing::write_bytes(shard, bytes);
    const std::string message = testing::message_of([&] { TopKCacheReader::open(folder.path()); });
    EXPECT_NE(message.find(at >= 256 ? "is corrupt: the checksum of its rows" : "has a corrupt header"),
              std::string::npos)
        << at << ": " << message;
  }
  testing::write_bytes(shard, good);
  EXPECT_NO_THROW(TopKCacheReader::open(folder.path()));
}

TEST(SampledCache, RowsWhoseCountsDoNotAddUpToKAreRefused) {
  testing::TempFolder folder;
  TopKCacheWriter writer(folder.path(), sampled_spec(CacheValueType::F32));
  Rows rows = random_rows(1, 6);
  rows.counts[0] += 1;
  EXPECT_THROW(writer.append_sampled(0, 1, rows.indices, rows.counts, rows.log_ratios, rows.lse), Error);
}

// A student batch's targets from a sampled cache: the loss's log-weights log(c / K) + log(p / r), -inf where no draw
// hit, and the rows past the cache masked.
TEST(SampledCache, BatchTargetsAreTheEstimatorsLogWeights) {
  testing::TempFolder folder;
  const TopKCacheSpec spec = sampled_spec(CacheValueType::F32);
  const Rows rows = random_rows(spec.cache_tokens, 7);
  write_sampled(folder.path(), spec, rows);
  const TopKCacheReader reader = TopKCacheReader::open(folder.path());
  data::TokenBatch batch;
  batch.batch = 2;
  batch.seq = 4;
  batch.window_starts = {3, 15};  // the second row runs past the 17 positions
  batch.targets.assign(8, 1);
  const losses::TopkTargets t = cache_targets_for_batch(reader, batch);
  const std::vector<int32_t> ids = t.indices.to_ints(), mask = t.mask.to_ints();
  const std::vector<double> weights = t.logprobs.to_doubles();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t position = batch.window_starts[static_cast<size_t>(b)] + i, row = b * 4 + i;
      ASSERT_EQ(mask[static_cast<size_t>(row)], position < 17 ? 1 : 0) << position;
      if (position >= 17) continue;
      for (int64_t j = 0; j < kDraws; ++j) {
        const size_t at = static_cast<size_t>(position * kDraws + j), got = static_cast<size_t>(row * kDraws + j);
        EXPECT_EQ(ids[got], rows.indices[at]);
        if (rows.counts[at] == 0) {
          EXPECT_EQ(weights[got], -std::numeric_limits<double>::infinity());
        } else {
          EXPECT_NEAR(weights[got], std::log(rows.counts[at] / double{kDraws}) + rows.log_ratios[at], 1e-6);
        }
      }
    }
}

}  // namespace
}  // namespace retort::distill
