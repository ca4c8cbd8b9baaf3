#pragma once
// The top-k teacher cache: for every token position of a dataset, the teacher's k most likely next tokens
// with their full-vocabulary log-probabilities and the teacher's log-sum-exp (distillation.md, "Teacher
// side"). Written once by the teacher run, memory-mapped by the student's trainer.
//
// A cache is a folder of shards topk_00000.bin, topk_00001.bin, ...; shard i holds the rows of positions
// [i S, min((i + 1) S, cache_tokens)) for S = shard_tokens, so the shard boundaries depend only on the settings
// and a resumed run writes byte-identical files. Every shard is written to a temporary file and renamed, so a
// shard on disk is either absent or complete.
//
// Byte layout of a shard (little-endian), a 256-byte header then the payload:
//   offset size  field
//        0    8  magic "RTTOPKC\0"
//        8    4  u32 format version (1)
//       12    4  u32 header size in bytes (256)
//       16    4  u32 k: entries per token
//       20    4  u32 log-probability dtype: 1 = f32, 2 = bf16
//       24    8  u64 vocabulary size of the teacher (every index is < this)
//       32    8  u64 shard index i
//       40    8  u64 first position: i x shard_tokens
//       48    8  u64 token count: rows in this shard
//       56    8  u64 cache tokens: rows of the whole cache (all shards)
//       64    8  u64 shard tokens S: rows per shard (the last shard may hold fewer)
//       72    8  u64 dataset token count: tokens of the dataset the cache was made from
//       80    8  u64 dataset hash: FNV-1a 64 of the dataset's tokens as little-endian int32 (dataset_identity)
//       88    8  u64 payload checksum: FNV-1a 64 of the payload bytes
//       96    4  u32 tokenizer id length L (at most 124)
//      100  124  tokenizer id: L bytes of text (e.g. the tokenizer's fingerprint), zero padded
//      224    8  u64 header checksum: FNV-1a 64 of bytes [0, 224)
//      232   24  zero
//   payload: `token count` records of 4k + k e + 4 bytes (e = 4 for f32, 2 for bf16), no padding:
//       int32 indices[k]      descending by log-probability, ties to the smaller id
//       logprob[k]            f32 or bf16 (round to nearest even): log p(index) over the FULL vocabulary
//       f32 lse               the teacher's log-sum-exp of that row
// k = 64 in bf16 is 388 bytes a token.
//
// A sampled cache (CacheKind::Sampled, sampled-logit KD; distill/cache/teacher_sample.h) has format version 2: the
// same header, plus bytes [232, 256) (the header checksum then covers [0, 224) followed by [232, 256)):
//      232    4  u32 cache kind: 1 = top-k, 2 = sampled
//      236    4  zero
//      240    8  f64 proposal temperature t: the ids were drawn from r ~ p^(1/t)
//      248    8  u64 sampling seed
//   payload: records of 4k + 2k + k e + 4 bytes, k = K draws per token:
//       int32 indices[k]      the distinct ids drawn, ascending, then unused filler ids (count 0)
//       u16 counts[k]         draws of each id (they add up to K)
//       log_ratio[k]          f32 or bf16: log(p_j / r_j), the importance log-weight (0 at t = 1)
//       f32 lse               the teacher's log-sum-exp of that row
// Top-k caches keep version 1 (no kind field; byte for byte what earlier builds wrote and read).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/data/content_hash.h"
#include "core/tensor/tensor.h"

namespace retort::distill {

inline constexpr int kTopKCacheVersion = 1;     // top-k caches
inline constexpr int kSampledCacheVersion = 2;  // caches with a kind field (sampled caches)
inline constexpr int kMaxSampledDraws = 65535;  // the counts are u16
inline constexpr int64_t kTopKCacheHeaderBytes = 256;
inline constexpr size_t kTopKCacheMaxTokenizerId = 124;

enum class CacheValueType : uint32_t { F32 = 1, BF16 = 2 };
CacheValueType cache_value_type_from_name(const std::string& name);  // "f32" | "bf16"
const char* cache_value_type_name(CacheValueType type);

// What a cache's rows hold: the teacher's top-k log-probabilities, or K ids drawn from the teacher with counts and
// importance log-weights (sampled-logit KD).
enum class CacheKind : uint32_t { TopK = 1, Sampled = 2 };
CacheKind cache_kind_from_name(const std::string& name);  // "topk" | "sampled"
const char* cache_kind_name(CacheKind kind);

// Which dataset a cache belongs to: its token count and a hash of its tokens.
struct DatasetIdentity {
  int64_t tokens = 0;
  uint64_t hash = 0;
  bool operator==(const DatasetIdentity&) const = default;
};

// Hashes a token stream piece by piece (the dataset may be larger than memory).
class DatasetHasher {
 public:
  void update(std::span<const int32_t> tokens);
  DatasetIdentity identity() const { return {tokens_, hash_.value()}; }

 private:
  int64_t tokens_ = 0;
  data::ContentHash hash_;
};

DatasetIdentity dataset_identity(std::span<const int32_t> tokens);

// What a cache is, fixed when it is started; every shard repeats it.
struct TopKCacheSpec {
  CacheKind kind = CacheKind::TopK;
  int k = 64;  // top-k: entries per token; sampled: draws per token (K)
  int64_t vocab = 0;
  CacheValueType value_type = CacheValueType::BF16;
  std::string tokenizer_id;
  DatasetIdentity dataset;
  int64_t cache_tokens = 0;         // positions [0, cache_tokens) of the dataset get a row
  int64_t shard_tokens = 1 << 20;   // rows per shard
  double sample_temperature = 1.0;  // sampled: the proposal temperature t
  uint64_t sample_seed = 0;         // sampled: the seed of the draws

  int64_t record_bytes() const;
  int64_t shard_count() const;
};

std::string topk_shard_file_name(int64_t index);  // "topk_00000.bin"

// Writes the shards of one cache folder in position order. Opening a folder that already holds shards of the
// same cache resumes it: the complete shards are kept (each is validated) and next_token() is the first
// position of the first missing shard. Shards of a different cache (other settings, dataset or tokenizer) are
// an InputError: use another folder or delete it.
class TopKCacheWriter {
 public:
  TopKCacheWriter(std::filesystem::path directory, TopKCacheSpec spec);

  const TopKCacheSpec& spec() const { return spec_; }
  // The first position not yet on disk (rows buffered for a shard that is not full yet count as missing).
  int64_t next_token() const { return next_token_; }
  // Positions held in complete shards, as found when the writer was opened (0 for a new cache).
  int64_t resumed_tokens() const { return resumed_tokens_; }
  bool complete() const { return next_token_ == spec_.cache_tokens; }

  // Rows for positions [first_position, first_position + count): indices [count * k], logprobs [count * k],
  // lse [count], host memory. Rows before next_token() are skipped (a resumed run recomputes part of a window);
  // a gap or rows past cache_tokens are an Error. A shard is written as soon as all its rows are in.
  void append(int64_t first_position, int64_t count, std::span<const int32_t> indices, std::span<const float> logprobs,
              std::span<const float> lse);
  // The same for a sampled cache: ids [count * k], counts [count * k] (each row adds up to k), importance
  // log-ratios log(p / r) [count * k], lse [count].
  void append_sampled(int64_t first_position, int64_t count, std::span<const int32_t> indices,
                      std::span<const uint16_t> counts, std::span<const float> log_ratios, std::span<const float> lse);

 private:
  void write_shard();
  // Rows [skip, count) of one append: `encode(r, out)` writes row r's record bytes.
  template <typename Encode>
  void append_records(int64_t first_position, int64_t count, Encode encode);

  std::filesystem::path directory_;
  TopKCacheSpec spec_;
  int64_t next_token_ = 0;
  int64_t resumed_tokens_ = 0;
  int64_t buffered_ = 0;  // rows in buffer_, starting at next_token_
  std::vector<unsigned char> buffer_;
};

// What a trainer expects of a cache; each set field must match, or opening it is an InputError.
struct TopKCacheExpectation {
  std::optional<CacheKind> kind = std::nullopt;  // the other kind is an InputError that names distill.cache_kind
  std::optional<int> k = std::nullopt;
  std::optional<std::string> tokenizer_id = std::nullopt;
  std::optional<DatasetIdentity> dataset = std::nullopt;
  bool verify_checksums = true;  // reads every payload once on open
};

// Rows of the cache as host tensors.
struct TopKRows {
  Tensor indices;   // i32 [n, k]
  Tensor logprobs;  // f32 [n, k]
  Tensor lse;       // f32 [n]
};

// Rows of a sampled cache as host tensors.
struct SampledRows {
  Tensor indices;     // i32 [n, k]: distinct ids
  Tensor counts;      // i32 [n, k]: draws of each (0 for filler ids); a row adds up to k
  Tensor log_ratios;  // f32 [n, k]: log(p / r)
  Tensor lse;         // f32 [n]
};

// Memory-maps every shard of a complete cache. Truncated, corrupt, missing or mismatched shards are an
// InputError naming the file and what to do.
class TopKCacheReader {
 public:
  static TopKCacheReader open(const std::filesystem::path& directory, const TopKCacheExpectation& expect = {});

  const TopKCacheSpec& spec() const { return spec_; }
  int64_t tokens() const { return spec_.cache_tokens; }
  int k() const { return spec_.k; }

  // The rows of positions [start, start + count) (may span shards).
  TopKRows rows(int64_t start, int64_t count) const;
  // The same rows written straight into caller buffers of count x k ids and log-probabilities (and count lse
  // values when `lse` is not null): how a training step fills its batch without intermediate copies.
  void read_rows(int64_t start, int64_t count, int32_t* indices, float* logprobs, float* lse = nullptr) const;
  // A sampled cache's rows (read_rows and rows() refuse a sampled cache, these a top-k one).
  SampledRows sampled_rows(int64_t start, int64_t count) const;
  void read_sampled_rows(int64_t start, int64_t count, int32_t* indices, int32_t* counts, float* log_ratios,
                         float* lse = nullptr) const;

  struct Shard;  // one memory-mapped shard file (topk_cache.cpp)

 private:
  TopKCacheReader() = default;
  void check_kind(CacheKind wanted) const;

  std::filesystem::path directory_;
  TopKCacheSpec spec_;
  std::vector<std::shared_ptr<const Shard>> shards_;
};

}  // namespace retort::distill
