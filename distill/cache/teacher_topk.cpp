#include "distill/cache/teacher_topk.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/data/token_shard.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "distill/cache/teacher_sample.h"
#include "parallel/tp/vocab_topk.h"

namespace retort::distill {

namespace {

// The dataset's shards as one stream of positions.
class TokenStream {
 public:
  explicit TokenStream(const TeacherTopKDataset& dataset) {
    RETORT_INPUT_CHECK(!dataset.shards.empty(),
                       "teacher top-k: the dataset has no token shards; prepare the data first");
    for (const auto& path : dataset.shards) {
      shards_.push_back(data::TokenShard::open(path, dataset.vocab_size));
      starts_.push_back(size_);
      size_ += shards_.back().size();
    }
  }
  int64_t size() const { return size_; }

  // Tokens [start, start + out.size()), across shard boundaries.
  void read(int64_t start, std::span<int32_t> out) const {
    size_t done = 0;
    size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    while (done < out.size()) {
      const int64_t begin = start + static_cast<int64_t>(done) - starts_[s];
      const int64_t n = std::min<int64_t>(shards_[s].size() - begin, static_cast<int64_t>(out.size() - done));
      shards_[s].copy_to(begin, out.subspan(done, static_cast<size_t>(n)));
      done += static_cast<size_t>(n);
      ++s;
    }
  }

  DatasetIdentity identity() const {
    DatasetHasher hasher;
    std::vector<int32_t> chunk;
    constexpr int64_t kChunk = 1 << 20;
    for (int64_t p = 0; p < size_; p += kChunk) {
      chunk.resize(static_cast<size_t>(std::min(kChunk, size_ - p)));
      read(p, chunk);
      hasher.update(chunk);
    }
    return hasher.identity();
  }

 private:
  std::vector<data::TokenShard> shards_;
  std::vector<int64_t> starts_;
  int64_t size_ = 0;
};

void check_options(const TeacherTopKOptions& o) {
  RETORT_INPUT_CHECK(o.batch_size >= 1 && o.seq_len >= 1,
                     "teacher top-k: batch size ({}) and sequence length ({}) must be positive", o.batch_size,
                     o.seq_len);
  RETORT_INPUT_CHECK(!o.output_dir.empty(), "teacher top-k: set the output folder of the cache");
  RETORT_INPUT_CHECK(o.vocab >= o.k && o.k >= 1,
                     "teacher top-k: k = {} must lie in [1, vocabulary = {}]; set the teacher's vocabulary size", o.k,
                     o.vocab);
  RETORT_INPUT_CHECK(o.log_every >= 1, "teacher top-k: log_every must be positive, got {}", o.log_every);
}

}  // namespace

TeacherTopKReport generate_teacher_topk(const TeacherLogitsFn& teacher, const TeacherTopKDataset& dataset,
                                        const TeacherTopKOptions& options) {
  check_options(options);
  const TokenStream stream(dataset);
  const int64_t T = options.seq_len, windows = stream.size() / T;
  RETORT_INPUT_CHECK(windows >= 1,
                     "teacher top-k: the dataset has {} tokens, fewer than one window of seq_len = {}; use a shorter "
                     "sequence length or more data",
                     stream.size(), T);
  const bool writes = !options.group || options.group->rank() == 0;
  const char* stage = options.kind == CacheKind::Sampled ? "teacher sampling" : "teacher top-k";

  TopKCacheSpec spec;
  spec.kind = options.kind;
  spec.sample_temperature = options.kind == CacheKind::Sampled ? options.sample_temperature : 1.0;
  spec.sample_seed = options.kind == CacheKind::Sampled ? options.sample_seed : 0;
  spec.k = options.k;
  spec.vocab = options.vocab;
  spec.value_type = options.dtype;
  spec.tokenizer_id = options.tokenizer_id;
  spec.dataset = stream.identity();
  spec.cache_tokens = windows * T;
  spec.shard_tokens = options.shard_tokens;

  std::unique_ptr<TopKCacheWriter> writer;
  int64_t resume_at = 0;
  if (writes) {
    writer = std::make_unique<TopKCacheWriter>(options.output_dir, spec);
    resume_at = writer->next_token();
  }
  if (options.group) {  // every rank must run the same batches (the top-k has collectives)
    // Two i32 words (f64 is not a GPU dtype): the low 31 bits and the rest.
    const std::vector<int32_t> words{static_cast<int32_t>(resume_at & 0x7FFFFFFF),
                                     static_cast<int32_t>(resume_at >> 31)};
    Tensor position = Tensor::from_ints(words, {2}, options.device);
    options.group->broadcast(position, 0);
    const std::vector<int32_t> got = position.to_ints();
    resume_at = (static_cast<int64_t>(got[1]) << 31) | got[0];
  }

  TeacherTopKReport report;
  report.cache_tokens = spec.cache_tokens;
  report.resumed_tokens = resume_at;
  if (resume_at > 0)
    spdlog::info("{}: resuming the cache in '{}' at token {} of {}", stage, options.output_dir.string(), resume_at,
                 spec.cache_tokens);
  const auto started = std::chrono::steady_clock::now();
  auto last_log = started;
  int64_t tokens_since_log = 0, calls = 0;
  std::vector<int32_t> tokens;
  tp::VocabTopKOptions topk_options{options.k, options.temperature, options.group};
  for (int64_t w = resume_at / T; w < windows; w += options.batch_size) {
    const int64_t b = std::min(options.batch_size, windows - w);
    tokens.resize(static_cast<size_t>(b * T));
    stream.read(w * T, tokens);
    const Tensor batch = Tensor::from_ints(tokens, {b, T}, options.device);
    const Tensor logits = teacher(batch);
    RETORT_INPUT_CHECK(logits.defined() && logits.ndim() == 3 && logits.size(0) == b && logits.size(1) == T,
                       "teacher top-k: the teacher returned {} for tokens [{}, {}]; it must return logits [{}, {}, "
                       "V_local]",
                       logits.defined() ? logits.describe() : "nothing", b, T, b, T);
    const int tp = options.group ? options.group->size() : 1;
    RETORT_INPUT_CHECK(logits.size(2) * tp == options.vocab,
                       "teacher top-k: the teacher's logits {} over {} rank(s) make a vocabulary of {}, but the "
                       "options say {}; set vocab to the teacher's vocabulary",
                       logits.describe(), tp, logits.size(2) * tp, options.vocab);
    RETORT_INPUT_CHECK(options.group || !logits.sharding().group || logits.sharding().group->size() == 1,
                       "teacher top-k: the teacher's logits are split over {}, but options.group is not set; pass the "
                       "tp group so that only its rank 0 writes",
                       logits.sharding().group ? logits.sharding().group->describe() : "");
    if (options.kind == CacheKind::Sampled) {
      std::vector<int64_t> positions(static_cast<size_t>(b * T));
      for (int64_t i = 0; i < b * T; ++i) positions[static_cast<size_t>(i)] = w * T + i;
      const VocabSample sample = sample_vocab(
          logits, positions,
          {options.k, options.temperature, options.sample_temperature, options.sample_seed, options.group});
      if (writer) writer->append_sampled(w * T, b * T, sample.indices, sample.counts, sample.log_ratios, sample.lse);
    } else {
      const tp::VocabTopK top = tp::vocab_topk(logits, topk_options);
      if (writer) {
        const std::vector<int32_t> indices = top.indices.to_ints();
        const std::vector<float> logprobs = top.logprobs.to_floats(), lse = top.lse.to_floats();
        writer->append(w * T, b * T, indices, logprobs, lse);
      }
    }
    const int64_t computed = b * T - std::max<int64_t>(0, resume_at - w * T);
    report.computed_tokens += computed;
    tokens_since_log += computed;
    ++calls;
    const auto now = std::chrono::steady_clock::now();
    if (calls % options.log_every == 0 || w + b >= windows) {
      const double seconds = std::chrono::duration<double>(now - last_log).count();
      spdlog::info("{}: {} / {} tokens ({:.1f}%), {:.0f} tokens/s", stage, (w + b) * T, spec.cache_tokens,
                   100.0 * static_cast<double>((w + b) * T) / static_cast<double>(spec.cache_tokens),
                   seconds > 0 ? static_cast<double>(tokens_since_log) / seconds : 0.0);
      last_log = now;
      tokens_since_log = 0;
    }
  }
  RETORT_CHECK(!writer || writer->complete(), "teacher top-k: the cache stopped at token {} of {}",
               writer->next_token(), spec.cache_tokens);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.tokens_per_second = report.seconds > 0 ? static_cast<double>(report.computed_tokens) / report.seconds : 0.0;
  spdlog::info("{}: cache of {} tokens in '{}' ({} computed in {}, {:.0f} tokens/s)", stage, spec.cache_tokens,
               options.output_dir.string(), report.computed_tokens, format_duration(report.seconds),
               report.tokens_per_second);
  return report;
}

}  // namespace retort::distill
