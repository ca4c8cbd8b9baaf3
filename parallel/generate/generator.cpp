#include "parallel/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "parallel/generate/graphed_decode_step.h"
#include "parallel/generate/kv_cache.h"

namespace retort::generate {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// splitmix64's finaliser: a bijection of 64-bit words that scatters neighbouring inputs.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void check_prompts(const GptConfig& config, const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& prompt = prompts[i];
    RETORT_INPUT_CHECK(!prompt.empty(), "prompt {} is empty: give every prompt at least one token", i);
    RETORT_INPUT_CHECK(static_cast<int64_t>(prompt.size()) < config.block_size,
                       "prompt {} has {} tokens but the model's context is {} (model.block_size): shorten it to at "
                       "most {} tokens so that there is room for a new one",
                       i, prompt.size(), config.block_size, config.block_size - 1);
    for (int32_t token : prompt)
      RETORT_INPUT_CHECK(token >= 0 && token < config.vocab_size,
                         "prompt {} holds token {}, outside the model's vocabulary [0, {})", i, token,
                         config.vocab_size);
  }
}

}  // namespace

uint64_t sequence_row_key(uint64_t sequence_id, int64_t position) {
  // Mixing the id before adding the position keeps (id, p) and (id', p') apart for every realistic pair, and the
  // outer mix spreads consecutive positions of one sequence over the whole key space.
  return mix64(mix64(sequence_id) + static_cast<uint64_t>(position));
}

std::vector<GeneratedSequence> generate_tokens(const GptModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerationOptions& options) {
  NoGradGuard no_grad;
  const GptConfig& config = model.config();
  options.sampling.validate();
  RETORT_INPUT_CHECK(options.max_new_tokens >= 1, "max_new_tokens must be at least 1, got {}", options.max_new_tokens);
  const int64_t n = static_cast<int64_t>(prompts.size());
  RETORT_INPUT_CHECK(options.sequence_ids.empty() || static_cast<int64_t>(options.sequence_ids.size()) == n,
                     "{} sequence ids for {} prompts: give one id per prompt (or none)", options.sequence_ids.size(),
                     n);
  check_prompts(config, prompts);
  if (n == 0) return {};

  std::vector<uint64_t> ids = options.sequence_ids;
  if (ids.empty())
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<uint64_t>(i));
  std::vector<int64_t> prompt_len(static_cast<size_t>(n));
  int64_t longest = 0;
  for (int64_t i = 0; i < n; ++i) longest = std::max(longest, prompt_len[i] = static_cast<int64_t>(prompts[i].size()));

  const Device device = model.named_parameters().front().second.device();
  // The weights in the compute dtype once for the whole generation (null for f32: nothing to cast).
  std::shared_ptr<const GptModel> inference = options.inference_model;
  if (!inference) inference = model.inference_copy(options.compute_dtype);
  RETORT_INPUT_CHECK(!inference || inference->config().n_layer == config.n_layer,
                     "GenerationOptions::inference_model has {} layers, the model {}: pass the model's own "
                     "inference_copy(compute_dtype)",
                     inference ? inference->config().n_layer : 0, config.n_layer);
  const GptModel& net = inference ? *inference : model;
  // The last token of a sequence is never fed back, so prompt + max_new_tokens positions always suffice.
  const int64_t capacity = std::min(config.block_size, longest + options.max_new_tokens);
  KvCache cache(net, n, capacity, options.compute_dtype, device);
  std::optional<GraphedDecodeStep> graphed;
  if (decode_graph_applies(net, options.cuda_graphs))
    graphed.emplace(net, cache, options.compute_dtype, options.sampling);

  std::vector<GeneratedSequence> out(static_cast<size_t>(n));
  std::vector<bool> finished(static_cast<size_t>(n), false);
  int64_t unfinished = n;
  std::vector<uint64_t> keys(static_cast<size_t>(n));

  // Records row r's sampled token and decides whether the row goes on.
  auto accept = [&](int64_t r, int32_t token, Clock::time_point now, Clock::time_point decode_start) {
    GeneratedSequence& seq = out[static_cast<size_t>(r)];
    seq.tokens.push_back(token);
    const int64_t count = static_cast<int64_t>(seq.tokens.size());
    bool done = true;
    if (options.on_token && !options.on_token(r, token))
      seq.finish = FinishReason::Stopped;
    else if (count >= options.max_new_tokens)
      seq.finish = FinishReason::MaxTokens;
    else if (prompt_len[r] + count >= config.block_size)
      seq.finish = FinishReason::ContextFull;
    else
      done = false;
    if (done) {
      finished[static_cast<size_t>(r)] = true;
      --unfinished;
      seq.decode_seconds = seconds_between(decode_start, now);
    }
  };

  // Prefill: every prompt right-padded to the longest, one forward; each row's logits are at its last token.
  const Clock::time_point start = Clock::now();
  Clock::time_point decode_start;
  {
    std::vector<int32_t> padded(static_cast<size_t>(n * longest), 0);
    for (int64_t r = 0; r < n; ++r) {
      std::copy(prompts[r].begin(), prompts[r].end(), padded.begin() + r * longest);
      keys[r] = sequence_row_key(ids[r], prompt_len[r]);
    }
    const Tensor logits =
        net.forward_cached(Tensor::from_ints(padded, {n, longest}, device), prompt_len, cache, options.compute_dtype);
    const std::vector<int32_t> next = sample_next_tokens(logits, options.sampling, keys);
    decode_start = Clock::now();
    for (int64_t r = 0; r < n; ++r) {
      out[r].prefill_seconds = seconds_between(start, decode_start);
      accept(r, next[r], decode_start, decode_start);
    }
  }

  if (graphed) {
    // Step s feeds every row its token s (the prefill drew token 0) at position prompt + s and draws token s + 1
    // with the key of that position. The host launches up to graphed->depth() steps ahead of the tokens it has
    // read, the later ones fed on the device with the tokens of the step before: a row that finished in a step
    // not read yet is fed once more (its token s is its last, so position prompt + s is inside the cache) and that
    // draw is dropped; a row known to be finished is fed at its last token's position (past its length, as the
    // eager path's padding) and its draws are dropped too.
    const int64_t depth = graphed->depth();
    std::vector<int32_t> host_ids, positions(static_cast<size_t>(n));
    // Whether step s can draw a token that is kept: a row not known to be finished has room for token s + 1.
    auto step_may_count = [&](int64_t s) {
      if (s + 1 >= options.max_new_tokens) return false;
      for (int64_t r = 0; r < n; ++r)
        if (!finished[r] && prompt_len[r] + s + 1 < config.block_size) return true;
      return false;
    };
    auto launch = [&](int64_t s) {
      const bool ids_from_host = s == 0 || depth == 1;
      host_ids.resize(ids_from_host ? static_cast<size_t>(n) : 0);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t count = static_cast<int64_t>(out[r].tokens.size());
        positions[r] = static_cast<int32_t>(finished[r] ? prompt_len[r] + count - 1 : prompt_len[r] + s);
        keys[r] = sequence_row_key(ids[r], prompt_len[r] + s + 1);
        if (ids_from_host) host_ids[r] = out[r].tokens.back();
      }
      graphed->launch(host_ids, positions, keys);
    };
    int64_t next_step = 0;
    while (unfinished > 0) {
      while (graphed->in_flight() < depth && step_may_count(next_step)) launch(next_step++);
      RETORT_CHECK(graphed->in_flight() > 0, "generate_tokens: {} sequences unfinished and no step to run", unfinished);
      const std::vector<int32_t> next = graphed->collect();
      const Clock::time_point now = Clock::now();
      for (int64_t r = 0; r < n; ++r)
        if (!finished[r]) accept(r, next[r], now, decode_start);
    }
    graphed->drain();
    for (auto& seq : out) seq.decode_graph_nodes = graphed->graph_nodes();
    return out;
  }

  // Decode: every row is fed its last token. A finished row rides along with valid 0: it does not advance (its
  // padding lands past its length, which is below the capacity since a last token is never fed), its token is a
  // real one so its logits stay finite, and its sample is ignored.
  std::vector<int32_t> last(static_cast<size_t>(n));
  std::vector<int64_t> valid(static_cast<size_t>(n));
  while (unfinished > 0) {
    for (int64_t r = 0; r < n; ++r) {
      const GeneratedSequence& seq = out[r];
      last[r] = seq.tokens.back();
      valid[r] = finished[r] ? 0 : 1;
      // The token fed now sits at prompt + count - 1; the one sampled from it at prompt + count.
      keys[r] = sequence_row_key(ids[r], prompt_len[r] + static_cast<int64_t>(seq.tokens.size()));
    }
    const Tensor logits =
        net.forward_cached(Tensor::from_ints(last, {n, 1}, device), valid, cache, options.compute_dtype);
    const std::vector<int32_t> next = sample_next_tokens(logits, options.sampling, keys);
    const Clock::time_point now = Clock::now();
    for (int64_t r = 0; r < n; ++r)
      if (!finished[r]) accept(r, next[r], now, decode_start);
  }
  return out;
}

}  // namespace retort::generate
