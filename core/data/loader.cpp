#include "core/data/loader.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>

#include "core/data/rng.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;
namespace {

const char* mode_name(LoaderMode mode) {
  return mode == LoaderMode::kTrain ? "train" : "eval";
}

void validate(const TokenLoaderOptions& options) {
  RETORT_INPUT_CHECK(options.batch_size > 0, "loader batch size {} must be positive", options.batch_size);
  RETORT_INPUT_CHECK(options.seq_len > 0, "loader sequence length {} must be positive", options.seq_len);
  RETORT_INPUT_CHECK(options.world > 0, "loader world size {} must be positive", options.world);
  RETORT_INPUT_CHECK(options.rank >= 0 && options.rank < options.world, "loader rank {} is outside world size {}",
                     options.rank, options.world);
  RETORT_INPUT_CHECK(options.max_batches >= 0, "loader max_batches {} must be >= 0 (0 = no cap)", options.max_batches);
}

}  // namespace

void to_json(nlohmann::json& out, const LoaderState& state) {
  out = nlohmann::json{{"epoch", state.epoch},           {"position", state.position}, {"seed", state.seed},
                       {"batch_size", state.batch_size}, {"seq_len", state.seq_len},   {"world", state.world},
                       {"windows", state.windows},       {"mode", state.mode}};
}

void from_json(const nlohmann::json& in, LoaderState& state) {
  try {
    in.at("epoch").get_to(state.epoch);
    in.at("position").get_to(state.position);
    in.at("seed").get_to(state.seed);
    in.at("batch_size").get_to(state.batch_size);
    in.at("seq_len").get_to(state.seq_len);
    in.at("world").get_to(state.world);
    in.at("windows").get_to(state.windows);
    in.at("mode").get_to(state.mode);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("invalid data loader state {}: {}", in.dump(), error.what()));
  }
}

TokenLoader::TokenLoader(const std::vector<fs::path>& shards, int64_t vocab_size, TokenLoaderOptions options)
    : options_(options) {
  validate(options_);
  RETORT_INPUT_CHECK(!shards.empty(),
                     "the data loader got no token shards: prepare the data first. A validation split is empty when "
                     "the data was made with data.val_fraction = 0, or given as data.shards without data.val_shards: "
                     "score such a run on other text (retort eval --data TEXT)");
  const int64_t T = options_.seq_len;
  first_window_.push_back(0);
  int64_t stream_tokens = 0;
  for (const fs::path& path : shards) {
    TokenShard shard = TokenShard::open(path, vocab_size);
    RETORT_INPUT_CHECK(shard.size() >= T + 1,
                       "token shard '{}' holds {} tokens, too few for one sequence of seq_len {} + 1: lower the "
                       "sequence length or give more data",
                       path.string(), shard.size(), T);
    // Windows start at 0, T, 2T, ... and need T + 1 tokens each.
    first_window_.push_back(first_window_.back() + (shard.size() - 1) / T);
    stream_start_.push_back(stream_tokens);
    stream_tokens += shard.size();
    shards_.push_back(std::move(shard));
  }
  total_windows_ = first_window_.back();
  const int64_t global_batch = options_.world * options_.batch_size;
  batches_per_epoch_ = total_windows_ / global_batch;
  RETORT_INPUT_CHECK(batches_per_epoch_ > 0,
                     "the shards hold {} windows of seq_len {} + 1 tokens, fewer than one global batch of world {} x "
                     "batch {} = {}: lower the batch size or sequence length, or give more data",
                     total_windows_, T, options_.world, options_.batch_size, global_batch);
  if (options_.mode == LoaderMode::kEval && options_.max_batches > 0) {
    batches_per_epoch_ = std::min(batches_per_epoch_, options_.max_batches);
  }
  build_epoch_order();
}

TokenLoader::WindowStart TokenLoader::window_start(int64_t window) const {
  const auto after = std::upper_bound(first_window_.begin(), first_window_.end(), window);
  const auto shard = static_cast<int64_t>(after - first_window_.begin()) - 1;
  return {shard, (window - first_window_[static_cast<size_t>(shard)]) * options_.seq_len};
}

void TokenLoader::build_epoch_order() {
  if (options_.mode == LoaderMode::kEval) return;
  order_.resize(static_cast<size_t>(total_windows_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  SplitMix64 rng(derive_seed(options_.seed, static_cast<uint64_t>(epoch_)));
  seeded_shuffle(std::span<int64_t>(order_), rng);
}

// The epoch rolls over as soon as its last batch is taken, so epoch() and state() always describe the next
// batch and one stream position has one state.
void TokenLoader::start_epoch_if_finished() {
  if (position_ < batches_per_epoch_) return;
  ++epoch_;
  position_ = 0;
  build_epoch_order();
}

TokenBatch TokenLoader::next() {
  const int64_t B = options_.batch_size;
  const int64_t T = options_.seq_len;
  TokenBatch batch{B, T, std::vector<int32_t>(static_cast<size_t>(B * T)),
                   std::vector<int32_t>(static_cast<size_t>(B * T)), std::vector<int64_t>(static_cast<size_t>(B))};
  const int64_t first = (position_ * options_.world + options_.rank) * B;
  for (int64_t row = 0; row < B; ++row) {
    const int64_t slot = first + row;
    const int64_t window = options_.mode == LoaderMode::kTrain ? order_[static_cast<size_t>(slot)] : slot;
    const WindowStart start = window_start(window);
    const TokenShard& shard = shards_[static_cast<size_t>(start.shard)];
    batch.window_starts[static_cast<size_t>(row)] = stream_start_[static_cast<size_t>(start.shard)] + start.offset;
    shard.copy_to(start.offset,
                  std::span<int32_t>(batch.inputs).subspan(static_cast<size_t>(row * T), static_cast<size_t>(T)));
    shard.copy_to(start.offset + 1,
                  std::span<int32_t>(batch.targets).subspan(static_cast<size_t>(row * T), static_cast<size_t>(T)));
  }
  ++position_;
  start_epoch_if_finished();
  return batch;
}

LoaderState TokenLoader::state_at(int64_t epoch, int64_t position) const {
  return {epoch,          position,       options_.seed,           options_.batch_size, options_.seq_len,
          options_.world, total_windows_, mode_name(options_.mode)};
}

LoaderState TokenLoader::state() const {
  return state_at(epoch_, position_);
}

void TokenLoader::restore(const LoaderState& state) {
  const LoaderState here = state_at(state.epoch, state.position);
  const auto mismatch = [&](const char* what, const auto& saved, const auto& now) {
    RETORT_INPUT_CHECK(saved == now,
                       "cannot resume the data loader: the saved state has {} {} but this run has {}; resume with the "
                       "same data, batch size, sequence length, world size and seed, or start a fresh run",
                       what, saved, now);
  };
  mismatch("mode", state.mode, here.mode);
  mismatch("seed", state.seed, here.seed);
  mismatch("batch_size", state.batch_size, here.batch_size);
  mismatch("seq_len", state.seq_len, here.seq_len);
  mismatch("world", state.world, here.world);
  mismatch("windows", state.windows, here.windows);
  RETORT_INPUT_CHECK(state.epoch >= 0 && state.position >= 0 && state.position <= batches_per_epoch_,
                     "cannot resume the data loader: position {} of epoch {} is outside 0..{} batches per epoch",
                     state.position, state.epoch, batches_per_epoch_);
  const bool new_epoch = state.epoch != epoch_ || order_.empty();
  epoch_ = state.epoch;
  position_ = state.position;
  if (new_epoch) build_epoch_order();
  start_epoch_if_finished();
}

}  // namespace retort::data
