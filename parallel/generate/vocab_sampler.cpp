#include "parallel/generate/vocab_sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/kernels/kernels.h"
#include "core/util/error.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/generate/sampling_math.h"
#include "parallel/tp/vocab_shard.h"

namespace retort::generate {

namespace {

namespace sm = sampling;
using Wide = unsigned __int128;  // global fixed-point masses: up to 2^31 tokens of up to 2^44 each

constexpr const char* kOp = "sample_next_tokens";

// The group to reduce over: the override when given, else the logits' own when they are split on the last dim.
// Null when there is nothing to reduce (no group, one rank, replicated logits).
std::shared_ptr<Communicator> vocab_group(const Tensor& logits, const std::shared_ptr<Communicator>& override) {
  if (override) return override->size() > 1 ? override : nullptr;
  const ShardingSpec& spec = logits.sharding();
  if (!spec.group || spec.group->size() == 1 || spec.partition_dim < 0) return nullptr;
  RETORT_INPUT_CHECK(spec.partition_dim == logits.ndim() - 1 && spec.blocks == 1,
                     "{}: logits {} are sharded on dim {} (in {} blocks), not on the vocabulary (the last dim, one "
                     "block); pass the group to override",
                     kOp, logits.describe(), spec.partition_dim, spec.blocks);
  return spec.group;
}

// Where the collectives' buffers live: NCCL reduces device memory, Gloo host memory (GPU logits over a Gloo group
// work too, through host copies of the O(rows) buffers).
Device collective_device(const Communicator& group, const Tensor& logits) {
  return group.backend() == "nccl" ? logits.device() : Device::cpu();
}

// ---- the shard passes, on the logits' device ----------------------------------------------------------------------
std::vector<uint64_t> best_gumbel_candidates(const Tensor& logits, int64_t index_base, const SamplingOptions& options,
                                             const std::vector<uint64_t>& row_keys,
                                             const std::vector<uint32_t>& min_keys) {
  if (logits.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    return kernels::cuda::best_gumbel_candidates(logits, index_base, options.temperature, options.seed, row_keys,
                                                 min_keys);
#else
    RETORT_INPUT_CHECK(false, "{}: logits {} are on a GPU, but this build has no CUDA backend", kOp, logits.describe());
#endif
  }
  return kernels::cpu::best_gumbel_candidates(logits, index_base, options.temperature, options.seed, row_keys,
                                              min_keys);
}

std::vector<uint64_t> nucleus_histogram(const Tensor& logits, double temperature, const std::vector<float>& row_max,
                                        const std::vector<uint32_t>& prefixes, uint32_t mask, int shift) {
  if (logits.device().is_cuda()) {
#ifdef RETORT_WITH_CUDA
    return kernels::cuda::nucleus_histogram(logits, temperature, row_max, prefixes, mask, shift);
#else
    RETORT_INPUT_CHECK(false, "{}: logits {} are on a GPU, but this build has no CUDA backend", kOp, logits.describe());
#endif
  }
  return kernels::cpu::nucleus_histogram(logits, temperature, row_max, prefixes, mask, shift);
}

// ---- O(rows) collectives -----------------------------------------------------------------------------------------
// MAX over the group of packed candidates: as doubles they are positive normal numbers ordered like the integers
// (sampling::pack_candidate), so one all-reduce of rows doubles picks every row's winner.
void max_over_group(std::vector<uint64_t>& packed, Communicator* group, const Tensor& logits) {
  if (!group || packed.empty()) return;
  std::vector<double> view(packed.size());
  for (size_t i = 0; i < packed.size(); ++i) view[i] = sm::double_of(packed[i]);
  Tensor buffer =
      Tensor::from_doubles(view, {static_cast<int64_t>(view.size())}, DType::F64, collective_device(*group, logits));
  group->all_reduce(buffer, ReduceOp::Max);
  view = buffer.to_doubles();
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = sm::bits_of(view[i]);
}

// Exact SUM over the group of 64-bit integers: each travels as two doubles holding its 32-bit halves, whose sums
// stay below 2^53 (exact) for any group of fewer than 2^21 ranks.
std::vector<Wide> exact_sum_over_group(const std::vector<uint64_t>& local, Communicator* group, const Tensor& logits) {
  std::vector<Wide> total(local.begin(), local.end());
  if (!group || local.empty()) return total;
  std::vector<double> halves(2 * local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    halves[2 * i] = static_cast<double>(local[i] >> 32);
    halves[2 * i + 1] = static_cast<double>(local[i] & 0xFFFFFFFFull);
  }
  Tensor buffer = Tensor::from_doubles(halves, {static_cast<int64_t>(halves.size())}, DType::F64,
                                       collective_device(*group, logits));
  group->all_reduce(buffer, ReduceOp::Sum);
  halves = buffer.to_doubles();
  for (size_t i = 0; i < local.size(); ++i)
    total[i] =
        (static_cast<Wide>(static_cast<uint64_t>(halves[2 * i])) << 32) + static_cast<uint64_t>(halves[2 * i + 1]);
  return total;
}

// ---- per-row checks, on values identical on every rank (so every rank throws alike) --------------------------------
void check_row(uint32_t top_key, int64_t row, bool sampling) {
  RETORT_INPUT_CHECK(top_key != sm::kNanKey, "{}: row {} of the logits holds NaN; check the model's output", kOp, row);
  RETORT_INPUT_CHECK(top_key > sm::kNegativeInfinityKey,
                     "{}: every logit of row {} is -inf, so no token can be picked; leave at least one token allowed",
                     kOp, row);
  RETORT_INPUT_CHECK(!sampling || top_key != sm::kPositiveInfinityKey,
                     "{}: row {} holds a +inf logit; sampling needs finite logits (-inf excludes a token) or "
                     "temperature 0",
                     kOp, row);
}

// Every row's (max logit, smallest id holding it) over the whole vocabulary, packed: the local top-1 of the shard
// kernel, then one MAX all-reduce.
std::vector<uint64_t> global_argmax(const Tensor& logits, int64_t index_base, Communicator* group) {
  const int64_t rows = logits.size(0);
  Tensor values = Tensor::empty({rows, 1}, DType::F32, logits.device());
  Tensor indices = Tensor::empty({rows, 1}, DType::I32, logits.device());
  Tensor no_lse;
  ::retort::kernels::topk(logits, index_base, Tensor(), values, indices, no_lse);
  const std::vector<float> top = values.to_floats();
  const std::vector<int32_t> ids = indices.to_ints();
  std::vector<uint64_t> packed(static_cast<size_t>(rows));
  for (size_t r = 0; r < packed.size(); ++r) packed[r] = sm::pack_candidate(sm::order_key(top[r]), ids[r]);
  max_over_group(packed, group, logits);
  return packed;
}

// The nucleus of every row as the smallest order key it keeps. Radix search on the keys, kDigitBits at a time from
// the top: a pass sums the fixed-point masses of the tokens still in range per digit (the shard kernel, then one
// exact SUM all-reduce of rows x kBins integers), and every row keeps the highest digit at which the mass above
// reaches top_p x the total. After 32 / kDigitBits passes the key is pinned: the largest t with
// mass(x >= t) >= top_p x total, i.e. the smallest set of most likely tokens reaching top_p, plus the tokens tied
// with its last one.
std::vector<uint32_t> nucleus_min_keys(const Tensor& logits, const std::vector<float>& row_max, double temperature,
                                       double top_p, Communicator* group) {
  const size_t rows = row_max.size();
  std::vector<uint32_t> prefix(rows, 0);
  std::vector<Wide> above(rows, 0);
  std::vector<long double> target(rows, 0);
  uint32_t mask = 0;
  for (int pass = 0; pass < sm::kDigitPasses; ++pass) {
    const int shift = 32 - sm::kDigitBits * (pass + 1);
    const std::vector<Wide> bins =
        exact_sum_over_group(nucleus_histogram(logits, temperature, row_max, prefix, mask, shift), group, logits);
    for (size_t r = 0; r < rows; ++r) {
      const Wide* row_bins = bins.data() + r * sm::kBins;
      if (pass == 0) {
        Wide total = 0;
        for (int b = 0; b < sm::kBins; ++b) total += row_bins[b];
        target[r] = static_cast<long double>(top_p) * static_cast<long double>(total);
      }
      Wide mass = above[r];
      int chosen = -1;
      for (int b = sm::kBins - 1; b >= 0; --b) {
        if (static_cast<long double>(mass + row_bins[b]) >= target[r]) {
          chosen = b;
          break;
        }
        mass += row_bins[b];
      }
      RETORT_CHECK(chosen >= 0, "{}: the nucleus search of row {} lost its target (pass {})", kOp, r, pass);
      above[r] = mass;
      prefix[r] |= static_cast<uint32_t>(chosen) << shift;
    }
    mask |= static_cast<uint32_t>(sm::kBins - 1) << shift;
  }
  return prefix;
}

std::vector<int32_t> winners_to_tokens(const std::vector<uint64_t>& winners, bool sampling) {
  std::vector<int32_t> tokens(winners.size());
  for (size_t r = 0; r < winners.size(); ++r) {
    check_row(sm::key_of_candidate(winners[r]), static_cast<int64_t>(r), sampling);
    tokens[r] = static_cast<int32_t>(sm::id_of_candidate(winners[r]));
  }
  return tokens;
}

// top_k > 0: the exact global top-k of every row (each rank's local top-k with global ids, all-gathered, and a
// final top-k over the candidates, as in parallel/tp/vocab_topk), identical on every rank. The nucleus and the
// draw then need only these k candidates: host work over rows x k, no further collective.
std::vector<int32_t> sample_from_top_k(const Tensor& logits, const SamplingOptions& options, int64_t k,
                                       int64_t index_base, Communicator* group, const std::vector<uint64_t>& row_keys) {
  const int64_t rows = logits.size(0), local_k = std::min<int64_t>(k, logits.size(1));
  Tensor values = Tensor::empty({rows, local_k}, DType::F32, logits.device());
  Tensor indices = Tensor::empty({rows, local_k}, DType::I32, logits.device());
  Tensor no_lse;
  ::retort::kernels::topk(logits, index_base, Tensor(), values, indices, no_lse);
  if (group) {
    // Candidates in rank order: among equal values a smaller position is a smaller global id, so the final top-k's
    // tie rule (smaller position) is the global one (smaller id).
    const Device device = collective_device(*group, logits);
    const Tensor candidate_values = group->all_gather(values.to(device), 1);
    const Tensor candidate_ids = group->all_gather(indices.to(device), 1);
    values = Tensor::empty({rows, k}, DType::F32, device);
    indices = Tensor::empty({rows, k}, DType::I32, device);
    ::retort::kernels::topk(candidate_values, 0, candidate_ids, values, indices, no_lse);
  }
  const std::vector<float> top = values.to_floats();
  const std::vector<int32_t> ids = indices.to_ints();

  std::vector<int32_t> tokens(static_cast<size_t>(rows));
  std::vector<uint64_t> mass(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = top.data() + r * k;
    const int32_t* id = ids.data() + r * k;
    check_row(sm::order_key(x[0]), r, true);
    int64_t kept = k;
    if (options.top_p < 1.0) {
      // The same fixed-point masses and the same rule as the full-vocabulary search, over the candidates.
      Wide total = 0;
      for (int64_t i = 0; i < k; ++i) total += mass[i] = sm::quantized_mass(x[i], x[0], options.temperature);
      const long double target = static_cast<long double>(options.top_p) * static_cast<long double>(total);
      Wide running = mass[0];
      int64_t last = 0;
      while (last + 1 < k && static_cast<long double>(running) < target) running += mass[++last];
      while (last + 1 < k && sm::order_key(x[last + 1]) == sm::order_key(x[last])) ++last;
      kept = last + 1;
    }
    uint64_t best = 0;
    for (int64_t i = 0; i < kept; ++i) {
      const double noise = sm::gumbel_noise(options.seed, row_keys[static_cast<size_t>(r)], id[i]);
      best = std::max(best, sm::pack_candidate(sm::score_key(x[i], options.temperature, noise), id[i]));
    }
    tokens[static_cast<size_t>(r)] = static_cast<int32_t>(sm::id_of_candidate(best));
  }
  return tokens;
}

}  // namespace

void SamplingOptions::validate() const {
  RETORT_INPUT_CHECK(std::isfinite(temperature) && temperature >= 0,
                     "sampling: temperature = {} must be a finite number >= 0 (0 picks the most likely token)",
                     temperature);
  RETORT_INPUT_CHECK(top_k >= 0 && top_k <= kMaxSamplingTopK,
                     "sampling: top_k = {} must lie in [0, {}] (0 turns it off; {} is the most the GPU top-k kernel "
                     "selects per row)",
                     top_k, kMaxSamplingTopK, kMaxSamplingTopK);
  RETORT_INPUT_CHECK(top_p > 0 && top_p <= 1, "sampling: top_p = {} must lie in (0, 1] (1 turns it off)", top_p);
}

std::vector<int32_t> sample_next_tokens(const Tensor& logits_in, const SamplingOptions& options,
                                        const std::vector<uint64_t>& row_keys, std::shared_ptr<Communicator> group) {
  options.validate();
  RETORT_INPUT_CHECK(logits_in.defined() && logits_in.ndim() == 2 && logits_in.size(1) > 0,
                     "{}: logits must be 2-D [rows, V_local] with V_local > 0, got {}", kOp,
                     logits_in.defined() ? logits_in.describe() : "an undefined tensor");
  RETORT_INPUT_CHECK(logits_in.dtype() == DType::F32 || logits_in.dtype() == DType::BF16,
                     "{}: logits {} must be f32 or bf16", kOp, logits_in.describe());
  const int64_t rows = logits_in.size(0), local_vocab = logits_in.size(1);
  RETORT_INPUT_CHECK(static_cast<int64_t>(row_keys.size()) == rows,
                     "{}: {} row keys for {} rows of logits; pass one key per row", kOp, row_keys.size(), rows);
  RETORT_INPUT_CHECK(local_vocab <= sm::kMaxShardTokens,
                     "{}: a vocabulary shard of {} tokens is more than the {} the sampler's exact mass sums allow; "
                     "split the vocabulary over more ranks",
                     kOp, local_vocab, sm::kMaxShardTokens);
  const std::shared_ptr<Communicator> reduce_group = vocab_group(logits_in, group);
  Communicator* g = reduce_group.get();
  // A padded last shard (a vocabulary that does not divide by tp): its padding columns can never be drawn.
  const tp::VocabShard shard = tp::vocab_shard(logits_in, reduce_group, kOp);
  const Tensor logits = tp::mask_padding(logits_in, shard);
  const int64_t vocab = shard.total, index_base = shard.start;
  RETORT_INPUT_CHECK(vocab <= INT32_MAX, "{}: a vocabulary of {} tokens does not fit int32 token ids", kOp, vocab);
  if (rows == 0) return {};

  if (options.temperature == 0) return winners_to_tokens(global_argmax(logits, index_base, g), false);
  if (options.top_k > 0)
    return sample_from_top_k(logits, options, std::min<int64_t>(options.top_k, vocab), index_base, g, row_keys);

  std::vector<uint32_t> min_keys(static_cast<size_t>(rows), 0);
  if (options.top_p < 1.0) {
    const std::vector<uint64_t> top = global_argmax(logits, index_base, g);
    std::vector<float> row_max(top.size());
    for (size_t r = 0; r < top.size(); ++r) {
      check_row(sm::key_of_candidate(top[r]), static_cast<int64_t>(r), true);
      row_max[r] = sm::value_of_key(sm::key_of_candidate(top[r]));
    }
    min_keys = nucleus_min_keys(logits, row_max, options.temperature, options.top_p, g);
  }
  std::vector<uint64_t> winners = best_gumbel_candidates(logits, index_base, options, row_keys, min_keys);
  max_over_group(winners, g, logits);
  return winners_to_tokens(winners, true);
}

SinglePassSampling single_pass_sampling(const SamplingOptions& options) {
  if (options.temperature == 0) return SinglePassSampling::Argmax;
  if (options.top_k == 0 && options.top_p >= 1.0) return SinglePassSampling::Gumbel;
  return SinglePassSampling::None;
}

std::vector<int32_t> tokens_from_winners(const std::vector<uint64_t>& winners, SinglePassSampling pass) {
  RETORT_CHECK(pass != SinglePassSampling::None, "{}: no single pass picks these tokens", kOp);
  return winners_to_tokens(winners, pass == SinglePassSampling::Gumbel);
}

}  // namespace retort::generate
