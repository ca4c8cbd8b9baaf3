#include "distill/cache/topk_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/data/content_hash.h"
#include "core/io/atomic_file.h"
#include "core/tensor/dtype.h"
#include "core/util/error.h"

namespace retort::distill {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the top-k cache is little-endian");

namespace {

constexpr char kMagic[8] = {'R', 'T', 'T', 'O', 'P', 'K', 'C', '\0'};
constexpr size_t kHeaderChecksumOffset = 224;
// Version 2: the fields after the header checksum, which it covers too.
constexpr size_t kKindOffset = 232;

uint64_t fnv1a(const unsigned char* bytes, size_t n) {
  data::ContentHash hash;
  hash.update(std::string_view(reinterpret_cast<const char*>(bytes), n));
  return hash.value();
}

template <typename T>
void put(std::vector<unsigned char>& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));
}
template <typename T>
T get(const unsigned char* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

int64_t value_bytes(CacheValueType type) {
  return type == CacheValueType::F32 ? 4 : 2;
}

int version_of(CacheKind kind) {
  return kind == CacheKind::TopK ? kTopKCacheVersion : kSampledCacheVersion;
}

// Version 1 checksums bytes [0, 224); version 2 also the kind fields [232, 256) after the checksum itself.
uint64_t header_checksum(const unsigned char* h, uint32_t version) {
  data::ContentHash hash;
  hash.update(std::string_view(reinterpret_cast<const char*>(h), kHeaderChecksumOffset));
  if (version >= 2)
    hash.update(std::string_view(reinterpret_cast<const char*>(h + kKindOffset), kTopKCacheHeaderBytes - kKindOffset));
  return hash.value();
}

// What one shard's header says.
struct ShardHeader {
  TopKCacheSpec spec;
  int64_t index = 0;
  int64_t first = 0;
  int64_t count = 0;
  uint64_t payload_checksum = 0;
};

std::vector<unsigned char> encode_header(const TopKCacheSpec& spec, int64_t index, int64_t count,
                                         uint64_t payload_checksum) {
  std::vector<unsigned char> h(kTopKCacheHeaderBytes, 0);
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  const int version = version_of(spec.kind);
  put<uint32_t>(h, 8, static_cast<uint32_t>(version));
  put<uint32_t>(h, 12, kTopKCacheHeaderBytes);
  put<uint32_t>(h, 16, static_cast<uint32_t>(spec.k));
  put<uint32_t>(h, 20, static_cast<uint32_t>(spec.value_type));
  put<uint64_t>(h, 24, spec.vocab);
  put<uint64_t>(h, 32, index);
  put<uint64_t>(h, 40, index * spec.shard_tokens);
  put<uint64_t>(h, 48, count);
  put<uint64_t>(h, 56, spec.cache_tokens);
  put<uint64_t>(h, 64, spec.shard_tokens);
  put<uint64_t>(h, 72, spec.dataset.tokens);
  put<uint64_t>(h, 80, spec.dataset.hash);
  put<uint64_t>(h, 88, payload_checksum);
  put<uint32_t>(h, 96, static_cast<uint32_t>(spec.tokenizer_id.size()));
  std::memcpy(h.data() + 100, spec.tokenizer_id.data(), spec.tokenizer_id.size());
  if (version >= 2) {
    put<uint32_t>(h, kKindOffset, static_cast<uint32_t>(spec.kind));
    put<double>(h, kKindOffset + 8, spec.sample_temperature);
    put<uint64_t>(h, kKindOffset + 16, spec.sample_seed);
  }
  put<uint64_t>(h, kHeaderChecksumOffset, header_checksum(h.data(), static_cast<uint32_t>(version)));
  return h;
}

const char* kRegenerate = "generate the cache again (a rerun of the teacher resumes from the last complete shard)";

ShardHeader decode_header(const fs::path& path, const unsigned char* bytes, int64_t file_bytes) {
  RETORT_INPUT_CHECK(file_bytes >= kTopKCacheHeaderBytes,
                     "top-k cache shard '{}' is {} bytes, shorter than its {}-byte header: the file is truncated; "
                     "delete it and {}",
                     path.string(), file_bytes, kTopKCacheHeaderBytes, kRegenerate);
  RETORT_INPUT_CHECK(std::memcmp(bytes, kMagic, sizeof(kMagic)) == 0,
                     "'{}' is not a top-k cache shard (its magic bytes differ); point the trainer at the cache folder "
                     "the teacher run wrote",
                     path.string());
  const auto version = get<uint32_t>(bytes, 8);
  RETORT_INPUT_CHECK(version == kTopKCacheVersion || version == kSampledCacheVersion,
                     "top-k cache shard '{}' has format version {}, this build reads versions {} and {}; {}",
                     path.string(), version, kTopKCacheVersion, kSampledCacheVersion, kRegenerate);
  RETORT_INPUT_CHECK(get<uint64_t>(bytes, kHeaderChecksumOffset) == header_checksum(bytes, version),
                     "top-k cache shard '{}' has a corrupt header (its checksum does not match); delete it and {}",
                     path.string(), kRegenerate);
  ShardHeader h;
  TopKCacheSpec& s = h.spec;
  if (version >= 2) {
    const auto kind = get<uint32_t>(bytes, kKindOffset);
    RETORT_INPUT_CHECK(kind == 1 || kind == 2,
                       "top-k cache shard '{}' has an unknown cache kind code {} (1 = top-k, 2 = sampled); {}",
                       path.string(), kind, kRegenerate);
    s.kind = static_cast<CacheKind>(kind);
    s.sample_temperature = get<double>(bytes, kKindOffset + 8);
    s.sample_seed = get<uint64_t>(bytes, kKindOffset + 16);
  }
  s.k = static_cast<int>(get<uint32_t>(bytes, 16));
  const auto type = get<uint32_t>(bytes, 20);
  RETORT_INPUT_CHECK(
      (type == 1 || type == 2) && get<uint32_t>(bytes, 12) == kTopKCacheHeaderBytes,
      "top-k cache shard '{}' has an unknown log-probability dtype code {} (1 = f32, 2 = bf16) or header size; {}",
      path.string(), type, kRegenerate);
  s.value_type = static_cast<CacheValueType>(type);
  s.vocab = static_cast<int64_t>(get<uint64_t>(bytes, 24));
  h.index = static_cast<int64_t>(get<uint64_t>(bytes, 32));
  h.first = static_cast<int64_t>(get<uint64_t>(bytes, 40));
  h.count = static_cast<int64_t>(get<uint64_t>(bytes, 48));
  s.cache_tokens = static_cast<int64_t>(get<uint64_t>(bytes, 56));
  s.shard_tokens = static_cast<int64_t>(get<uint64_t>(bytes, 64));
  s.dataset.tokens = static_cast<int64_t>(get<uint64_t>(bytes, 72));
  s.dataset.hash = get<uint64_t>(bytes, 80);
  h.payload_checksum = get<uint64_t>(bytes, 88);
  const auto id_length = get<uint32_t>(bytes, 96);
  RETORT_INPUT_CHECK(id_length <= kTopKCacheMaxTokenizerId && s.k >= 1 && s.shard_tokens >= 1 && h.count >= 0,
                     "top-k cache shard '{}' has an inconsistent header; delete it and {}", path.string(), kRegenerate);
  s.tokenizer_id.assign(reinterpret_cast<const char*>(bytes + 100), id_length);
  const int64_t expected = kTopKCacheHeaderBytes + h.count * s.record_bytes();
  RETORT_INPUT_CHECK(file_bytes == expected,
                     "top-k cache shard '{}' is {} bytes, but its header promises {} rows of {} bytes ({} bytes in "
                     "all): the file is {}; delete it and {}",
                     path.string(), file_bytes, h.count, s.record_bytes(), expected,
                     file_bytes < expected ? "truncated" : "longer than its rows", kRegenerate);
  return h;
}

void check_payload(const fs::path& path, const ShardHeader& h, const unsigned char* bytes) {
  const uint64_t sum = fnv1a(bytes + kTopKCacheHeaderBytes, static_cast<size_t>(h.count * h.spec.record_bytes()));
  RETORT_INPUT_CHECK(sum == h.payload_checksum,
                     "top-k cache shard '{}' is corrupt: the checksum of its rows is {:016x}, the header says {:016x}; "
                     "delete it and {}",
                     path.string(), sum, h.payload_checksum, kRegenerate);
}

// The first field in which two specs differ, as "k: 64 vs 32"; empty when they agree.
std::string spec_difference(const TopKCacheSpec& a, const TopKCacheSpec& b) {
  if (a.kind != b.kind) return fmt::format("kind: {} vs {}", cache_kind_name(a.kind), cache_kind_name(b.kind));
  if (a.sample_temperature != b.sample_temperature)
    return fmt::format("sample temperature: {} vs {}", a.sample_temperature, b.sample_temperature);
  if (a.sample_seed != b.sample_seed) return fmt::format("sample seed: {} vs {}", a.sample_seed, b.sample_seed);
  if (a.k != b.k) return fmt::format("k: {} vs {}", a.k, b.k);
  if (a.vocab != b.vocab) return fmt::format("vocabulary: {} vs {}", a.vocab, b.vocab);
  if (a.value_type != b.value_type)
    return fmt::format("dtype: {} vs {}", cache_value_type_name(a.value_type), cache_value_type_name(b.value_type));
  if (a.tokenizer_id != b.tokenizer_id)
    return fmt::format("tokenizer id: '{}' vs '{}'", a.tokenizer_id, b.tokenizer_id);
  if (a.dataset.tokens != b.dataset.tokens)
    return fmt::format("dataset tokens: {} vs {}", a.dataset.tokens, b.dataset.tokens);
  if (a.dataset.hash != b.dataset.hash)
    return fmt::format("dataset hash: {:016x} vs {:016x}", a.dataset.hash, b.dataset.hash);
  if (a.cache_tokens != b.cache_tokens) return fmt::format("cache tokens: {} vs {}", a.cache_tokens, b.cache_tokens);
  if (a.shard_tokens != b.shard_tokens) return fmt::format("shard tokens: {} vs {}", a.shard_tokens, b.shard_tokens);
  return {};
}

void check_spec(const TopKCacheSpec& spec) {
  if (spec.kind == CacheKind::Sampled) {
    RETORT_INPUT_CHECK(spec.k >= 1 && spec.k <= kMaxSampledDraws,
                       "sampled cache: K = {} draws per token must lie in [1, {}] (the counts are 16-bit)", spec.k,
                       kMaxSampledDraws);
    RETORT_INPUT_CHECK(std::isfinite(spec.sample_temperature) && spec.sample_temperature > 0,
                       "sampled cache: the proposal temperature must be a positive number, got {}",
                       spec.sample_temperature);
  }
  RETORT_INPUT_CHECK(spec.k >= 1 && spec.vocab >= spec.k && spec.vocab <= int64_t{1} << 31,
                     "top-k cache: k = {} must lie in [1, vocabulary = {}] and the vocabulary must fit int32", spec.k,
                     spec.vocab);
  RETORT_INPUT_CHECK(spec.tokenizer_id.size() <= kTopKCacheMaxTokenizerId,
                     "top-k cache: the tokenizer id '{}' is {} bytes, at most {} fit the header; pass a fingerprint",
                     spec.tokenizer_id, spec.tokenizer_id.size(), kTopKCacheMaxTokenizerId);
  RETORT_INPUT_CHECK(spec.shard_tokens >= 1 && spec.cache_tokens >= 0 && spec.dataset.tokens >= 0,
                     "top-k cache: shard tokens ({}) must be positive and the token counts ({}, {}) not negative",
                     spec.shard_tokens, spec.cache_tokens, spec.dataset.tokens);
}

}  // namespace

// A read-only memory map of one shard, released with the last reference.
struct TopKCacheReader::Shard {
  fs::path path;
  const unsigned char* bytes = nullptr;
  size_t size = 0;
  ShardHeader header;
  ~Shard() {
    if (bytes && size) ::munmap(const_cast<unsigned char*>(bytes), size);
  }
};

CacheValueType cache_value_type_from_name(const std::string& name) {
  if (name == "f32" || name == "float32") return CacheValueType::F32;
  if (name == "bf16" || name == "bfloat16") return CacheValueType::BF16;
  throw InputError(fmt::format("unknown top-k cache dtype '{}': use f32 or bf16", name));
}

const char* cache_value_type_name(CacheValueType type) {
  return type == CacheValueType::F32 ? "f32" : "bf16";
}

CacheKind cache_kind_from_name(const std::string& name) {
  if (name == "topk") return CacheKind::TopK;
  if (name == "sampled") return CacheKind::Sampled;
  throw InputError(fmt::format("unknown cache kind '{}': use topk or sampled", name));
}

const char* cache_kind_name(CacheKind kind) {
  return kind == CacheKind::TopK ? "topk" : "sampled";
}

void DatasetHasher::update(std::span<const int32_t> tokens) {
  hash_.update(std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()));
  tokens_ += static_cast<int64_t>(tokens.size());
}

DatasetIdentity dataset_identity(std::span<const int32_t> tokens) {
  DatasetHasher hasher;
  hasher.update(tokens);
  return hasher.identity();
}

int64_t TopKCacheSpec::record_bytes() const {
  const int64_t counts = kind == CacheKind::Sampled ? 2 : 0;
  return int64_t{k} * (4 + counts + value_bytes(value_type)) + 4;
}

int64_t TopKCacheSpec::shard_count() const {
  return (cache_tokens + shard_tokens - 1) / shard_tokens;
}

std::string topk_shard_file_name(int64_t index) {
  return fmt::format("topk_{:05d}.bin", index);
}

namespace {

std::shared_ptr<TopKCacheReader::Shard> map_shard(const fs::path& path, bool verify_checksum) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw InputError(fmt::format("cannot open top-k cache shard '{}': {}", path.string(), std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("top-k cache shard '{}' is not a regular file", path.string()));
  }
  auto shard = std::make_shared<TopKCacheReader::Shard>();
  shard->path = path;
  shard->size = static_cast<size_t>(info.st_size);
  if (shard->size > 0) {
    void* mapping = ::mmap(nullptr, shard->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_error = errno;
    ::close(fd);
    if (mapping == MAP_FAILED) {
      shard->size = 0;
      throw Error(fmt::format("cannot map top-k cache shard '{}': {}", path.string(), std::strerror(map_error)));
    }
    shard->bytes = static_cast<const unsigned char*>(mapping);
  } else {
    ::close(fd);
  }
  shard->header = decode_header(path, shard->bytes, static_cast<int64_t>(shard->size));
  if (verify_checksum) check_payload(path, shard->header, shard->bytes);
  return shard;
}

// The shard's header must be shard `index` of `spec`, with the row count that index implies.
void check_place(const TopKCacheReader::Shard& shard, const TopKCacheSpec& spec, int64_t index,
                 const std::string& what_to_do) {
  const ShardHeader& h = shard.header;
  const std::string difference = spec_difference(h.spec, spec);
  RETORT_INPUT_CHECK(difference.empty(), "top-k cache shard '{}' belongs to a different cache ({}); {}",
                     shard.path.string(), difference, what_to_do);
  const int64_t first = index * spec.shard_tokens;
  const int64_t count = std::min(spec.shard_tokens, spec.cache_tokens - first);
  RETORT_INPUT_CHECK(h.index == index && h.first == first && h.count == count,
                     "top-k cache shard '{}' says it is shard {} with rows [{}, {}), expected shard {} with rows [{}, "
                     "{}); {}",
                     shard.path.string(), h.index, h.first, h.first + h.count, index, first, first + count, what_to_do);
}

}  // namespace

// ---- writer ---------------------------------------------------------------------------------------------

TopKCacheWriter::TopKCacheWriter(fs::path directory, TopKCacheSpec spec)
    : directory_(std::move(directory)), spec_(std::move(spec)) {
  check_spec(spec_);
  std::error_code ec;
  fs::create_directories(directory_, ec);
  RETORT_INPUT_CHECK(!ec, "cannot create the top-k cache folder '{}': {}", directory_.string(), ec.message());
  // Resume: keep the complete shards from the start; the first missing one is where the work continues.
  const std::string what_to_do =
      fmt::format("write to another folder, or delete '{}' to start the cache again", directory_.string());
  int64_t index = 0;
  for (; index < spec_.shard_count(); ++index) {
    const fs::path path = directory_ / topk_shard_file_name(index);
    if (!fs::exists(path)) break;
    const auto shard = map_shard(path, /*verify_checksum=*/true);
    check_place(*shard, spec_, index, what_to_do);
  }
  next_token_ = std::min(index * spec_.shard_tokens, spec_.cache_tokens);
  resumed_tokens_ = next_token_;
}

template <typename Encode>
void TopKCacheWriter::append_records(int64_t first_position, int64_t count, Encode encode) {
  const int64_t expected = next_token_ + buffered_;
  const int64_t skip = std::max<int64_t>(0, expected - first_position);
  RETORT_CHECK(first_position <= expected, "top-k cache append: rows start at position {}, but position {} is next",
               first_position, expected);
  RETORT_CHECK(first_position + count <= spec_.cache_tokens,
               "top-k cache append: rows [{}, {}) go past the cache's {} positions", first_position,
               first_position + count, spec_.cache_tokens);
  const int64_t record = spec_.record_bytes();
  for (int64_t r = skip; r < count; ++r) {
    const size_t at = buffer_.size();
    buffer_.resize(at + static_cast<size_t>(record));
    encode(r, buffer_.data() + at);
    ++buffered_;
    const int64_t shard_end = std::min((next_token_ / spec_.shard_tokens + 1) * spec_.shard_tokens, spec_.cache_tokens);
    if (next_token_ + buffered_ == shard_end) write_shard();
  }
}

namespace {

// k values in the cache's dtype (bf16 rounded to nearest even); returns the end of what it wrote.
unsigned char* put_values(unsigned char* out, const float* values, int64_t k, CacheValueType type) {
  if (type == CacheValueType::F32) {
    std::memcpy(out, values, static_cast<size_t>(4 * k));
    return out + 4 * k;
  }
  for (int64_t i = 0; i < k; ++i, out += 2) {
    const BFloat16 value(values[i]);
    std::memcpy(out, &value, 2);
  }
  return out;
}

// k values of the cache's dtype as f32 (bf16 is the top half of an f32: widening is a shift).
const unsigned char* get_values(const unsigned char* in, float* values, int64_t k, CacheValueType type) {
  if (type == CacheValueType::F32) {
    std::memcpy(values, in, static_cast<size_t>(4 * k));
    return in + 4 * k;
  }
  for (int64_t i = 0; i < k; ++i, in += 2) {
    uint16_t half;
    std::memcpy(&half, in, 2);
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(values + i, &bits, 4);
  }
  return in;
}

}  // namespace

void TopKCacheWriter::append(int64_t first_position, int64_t count, std::span<const int32_t> indices,
                             std::span<const float> logprobs, std::span<const float> lse) {
  const int64_t k = spec_.k;
  RETORT_CHECK(spec_.kind == CacheKind::TopK, "top-k cache append: the cache is a sampled one; use append_sampled");
  RETORT_CHECK(count >= 0 && static_cast<int64_t>(indices.size()) == count * k &&
                   static_cast<int64_t>(logprobs.size()) == count * k && static_cast<int64_t>(lse.size()) == count,
               "top-k cache append: {} rows need {} indices, {} log-probs and {} lse values, got {}, {}, {}", count,
               count * k, count * k, count, indices.size(), logprobs.size(), lse.size());
  append_records(first_position, count, [&](int64_t r, unsigned char* out) {
    std::memcpy(out, indices.data() + r * k, static_cast<size_t>(4 * k));
    out = put_values(out + 4 * k, logprobs.data() + r * k, k, spec_.value_type);
    std::memcpy(out, &lse[static_cast<size_t>(r)], 4);
  });
}

void TopKCacheWriter::append_sampled(int64_t first_position, int64_t count, std::span<const int32_t> indices,
                                     std::span<const uint16_t> counts, std::span<const float> log_ratios,
                                     std::span<const float> lse) {
  const int64_t k = spec_.k;
  RETORT_CHECK(spec_.kind == CacheKind::Sampled, "sampled cache append: the cache is a top-k one; use append");
  RETORT_CHECK(count >= 0 && static_cast<int64_t>(indices.size()) == count * k &&
                   static_cast<int64_t>(counts.size()) == count * k &&
                   static_cast<int64_t>(log_ratios.size()) == count * k && static_cast<int64_t>(lse.size()) == count,
               "sampled cache append: {} rows need {} ids, counts and log-ratios and {} lse values, got {}, {}, {}, {}",
               count, count * k, count, indices.size(), counts.size(), log_ratios.size(), lse.size());
  for (int64_t r = 0; r < count; ++r) {
    int64_t draws = 0;
    for (int64_t i = 0; i < k; ++i) draws += counts[static_cast<size_t>(r * k + i)];
    RETORT_CHECK(draws == k, "sampled cache append: row {} holds {} draws, not K = {}", first_position + r, draws, k);
  }
  append_records(first_position, count, [&](int64_t r, unsigned char* out) {
    std::memcpy(out, indices.data() + r * k, static_cast<size_t>(4 * k));
    std::memcpy(out + 4 * k, counts.data() + r * k, static_cast<size_t>(2 * k));
    out = put_values(out + 6 * k, log_ratios.data() + r * k, k, spec_.value_type);
    std::memcpy(out, &lse[static_cast<size_t>(r)], 4);
  });
}

void TopKCacheWriter::write_shard() {
  const int64_t index = next_token_ / spec_.shard_tokens;
  const std::vector<unsigned char> header =
      encode_header(spec_, index, buffered_, fnv1a(buffer_.data(), buffer_.size()));
  write_file_atomic(directory_ / topk_shard_file_name(index), [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(buffer_.data()), static_cast<std::streamsize>(buffer_.size()));
  });
  next_token_ += buffered_;
  buffered_ = 0;
  buffer_.clear();
}

// ---- reader ---------------------------------------------------------------------------------------------

TopKCacheReader TopKCacheReader::open(const fs::path& directory, const TopKCacheExpectation& expect) {
  const fs::path first_path = directory / topk_shard_file_name(0);
  RETORT_INPUT_CHECK(fs::exists(first_path),
                     "no top-k cache in '{}' (no {}): generate it with the teacher first, or point to the folder it "
                     "wrote",
                     directory.string(), first_path.filename().string());
  TopKCacheReader reader;
  reader.directory_ = directory;
  auto first = map_shard(first_path, expect.verify_checksums);
  reader.spec_ = first->header.spec;
  const TopKCacheSpec& spec = reader.spec_;
  const std::string regenerate = fmt::format("delete it and {}", kRegenerate);
  check_place(*first, spec, 0, regenerate);
  reader.shards_.push_back(first);
  for (int64_t index = 1; index < spec.shard_count(); ++index) {
    const fs::path path = directory / topk_shard_file_name(index);
    RETORT_INPUT_CHECK(fs::exists(path),
                       "the top-k cache in '{}' is incomplete: {} is missing (rows [{}, {}) of {}); {}",
                       directory.string(), path.filename().string(), index * spec.shard_tokens,
                       std::min((index + 1) * spec.shard_tokens, spec.cache_tokens), spec.cache_tokens, kRegenerate);
    auto shard = map_shard(path, expect.verify_checksums);
    check_place(*shard, spec, index, regenerate);
    reader.shards_.push_back(shard);
  }

  const std::string where = first_path.string();
  if (expect.kind && *expect.kind != spec.kind) {
    const bool sampled = spec.kind == CacheKind::Sampled;
    throw InputError(fmt::format(
        "the cache '{}' is a {} cache ({}), the run asks for a {} cache: set distill.cache_kind={} or write a {} "
        "cache into another distill.cache_dir",
        where, cache_kind_name(spec.kind),
        sampled ? "ids drawn from the teacher with counts and importance weights"
                : "the teacher's top-k log-probabilities",
        cache_kind_name(*expect.kind), cache_kind_name(spec.kind), cache_kind_name(*expect.kind)));
  }
  if (expect.k)
    RETORT_INPUT_CHECK(*expect.k == spec.k,
                       "the top-k cache '{}' holds k = {} entries per token, the run asks for k = {}; set k to {} or "
                       "generate a cache with k = {}",
                       where, spec.k, *expect.k, spec.k, *expect.k);
  if (expect.tokenizer_id)
    RETORT_INPUT_CHECK(*expect.tokenizer_id == spec.tokenizer_id,
                       "the top-k cache '{}' was made with tokenizer '{}', the student uses '{}': the token ids do "
                       "not match; generate the cache with the student's tokenizer (or use cross-tokenizer "
                       "distillation)",
                       where, spec.tokenizer_id, *expect.tokenizer_id);
  if (expect.dataset)
    RETORT_INPUT_CHECK(*expect.dataset == spec.dataset,
                       "the top-k cache '{}' was made from a dataset of {} tokens (hash {:016x}), but this dataset has "
                       "{} tokens (hash {:016x}); generate the cache for this dataset or use the dataset it was made "
                       "from",
                       where, spec.dataset.tokens, spec.dataset.hash, expect.dataset->tokens, expect.dataset->hash);
  return reader;
}

TopKRows TopKCacheReader::rows(int64_t start, int64_t count) const {
  TopKRows out{Tensor::empty({count, spec_.k}, DType::I32), Tensor::empty({count, spec_.k}, DType::F32),
               Tensor::empty({count}, DType::F32)};
  read_rows(start, count, out.indices.data<int32_t>(), out.logprobs.data<float>(), out.lse.data<float>());
  return out;
}

void TopKCacheReader::check_kind(CacheKind wanted) const {
  RETORT_INPUT_CHECK(spec_.kind == wanted,
                     "the cache '{}' is a {} cache, read here as a {} cache: set distill.cache_kind={} (or write a "
                     "{} cache into another distill.cache_dir)",
                     directory_.string(), cache_kind_name(spec_.kind), cache_kind_name(wanted),
                     cache_kind_name(spec_.kind), cache_kind_name(wanted));
}

void TopKCacheReader::read_rows(int64_t start, int64_t count, int32_t* indices, float* logprobs, float* lse) const {
  check_kind(CacheKind::TopK);
  RETORT_INPUT_CHECK(start >= 0 && count >= 0 && start + count <= spec_.cache_tokens,
                     "top-k cache '{}': rows [{}, {}) are outside its {} positions", directory_.string(), start,
                     start + count, spec_.cache_tokens);
  const int64_t k = spec_.k, record = spec_.record_bytes();
  for (int64_t p = start; p < start + count; ++p) {
    const Shard& shard = *shards_[static_cast<size_t>(p / spec_.shard_tokens)];
    const unsigned char* in = shard.bytes + kTopKCacheHeaderBytes + (p - shard.header.first) * record;
    const int64_t row = p - start;
    std::memcpy(indices + row * k, in, static_cast<size_t>(4 * k));
    in = get_values(in + 4 * k, logprobs + row * k, k, spec_.value_type);
    if (lse != nullptr) std::memcpy(lse + row, in, 4);
  }
}

SampledRows TopKCacheReader::sampled_rows(int64_t start, int64_t count) const {
  SampledRows out{Tensor::empty({count, spec_.k}, DType::I32), Tensor::empty({count, spec_.k}, DType::I32),
                  Tensor::empty({count, spec_.k}, DType::F32), Tensor::empty({count}, DType::F32)};
  read_sampled_rows(start, count, out.indices.data<int32_t>(), out.counts.data<int32_t>(), out.log_ratios.data<float>(),
                    out.lse.data<float>());
  return out;
}

void TopKCacheReader::read_sampled_rows(int64_t start, int64_t count, int32_t* indices, int32_t* counts,
                                        float* log_ratios, float* lse) const {
  check_kind(CacheKind::Sampled);
  RETORT_INPUT_CHECK(start >= 0 && count >= 0 && start + count <= spec_.cache_tokens,
                     "sampled cache '{}': rows [{}, {}) are outside its {} positions", directory_.string(), start,
                     start + count, spec_.cache_tokens);
  const int64_t k = spec_.k, record = spec_.record_bytes();
  for (int64_t p = start; p < start + count; ++p) {
    const Shard& shard = *shards_[static_cast<size_t>(p / spec_.shard_tokens)];
    const unsigned char* in = shard.bytes + kTopKCacheHeaderBytes + (p - shard.header.first) * record;
    const int64_t row = p - start;
    std::memcpy(indices + row * k, in, static_cast<size_t>(4 * k));
    for (int64_t i = 0; i < k; ++i) {
      uint16_t c;
      std::memcpy(&c, in + 4 * k + 2 * i, 2);
      counts[row * k + i] = c;
    }
    in = get_values(in + 6 * k, log_ratios + row * k, k, spec_.value_type);
    if (lse != nullptr) std::memcpy(lse + row, in, 4);
  }
}

}  // namespace retort::distill
