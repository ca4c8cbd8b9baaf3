#pragma once
// Batches of consecutive-token windows from token shards, for training (shuffled, endless) and evaluation
// (sequential, fixed).
//
// A window is T+1 consecutive tokens of one shard starting at a multiple of T (windows never cross a
// shard boundary); its first T tokens are the inputs and its last T the targets. An epoch visits windows
// in an order drawn from (seed, epoch) alone, in global batches of world x batch_size windows: rank r
// takes the r-th block of batch_size windows of each global batch, so ranks are disjoint, together cover
// the epoch, and a run with world W and batch B sees the same global batches as one with world 1 and batch
// W*B. The windows left over after the last full global batch of an epoch are skipped for that epoch (a
// different set each epoch, since the order changes).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/data/token_shard.h"

namespace retort::data {

enum class LoaderMode {
  kTrain,  // a new seeded order every epoch; epochs roll over by themselves
  kEval,   // windows in file order, the same every pass; optionally capped at max_batches
};

struct TokenLoaderOptions {
  int64_t batch_size = 8;  // sequences per batch on this rank
  int64_t seq_len = 256;   // T
  LoaderMode mode = LoaderMode::kTrain;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world = 1;
  // Eval mode: batches per pass at most (0 = every full batch).
  int64_t max_batches = 0;
};

struct TokenBatch {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<int32_t> inputs;   // batch x seq, row-major
  std::vector<int32_t> targets;  // batch x seq: inputs shifted left by one token
  // Per row: the position of its first input token in the shards read in order as one stream (shard i starts
  // at the total size of shards 0..i-1). Input (b, t) is stream token window_starts[b] + t; data kept per stream
  // position (the teacher's top-k cache) is looked up through it.
  std::vector<int64_t> window_starts;
};

// Where a loader is in its stream, plus the settings that define the stream, so that restoring into a
// loader with different settings is an error instead of a silently different batch sequence.
struct LoaderState {
  int64_t epoch = 0;
  int64_t position = 0;  // batches already taken in this epoch
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int64_t world = 0;
  int64_t windows = 0;
  std::string mode;
};

void to_json(nlohmann::json& out, const LoaderState& state);
void from_json(const nlohmann::json& in, LoaderState& state);

class TokenLoader {
 public:
  // Opens (and validates) every shard against vocab_size. Each shard must hold at least seq_len + 1
  // tokens, and the shards together at least one global batch of windows.
  TokenLoader(const std::vector<std::filesystem::path>& shards, int64_t vocab_size, TokenLoaderOptions options);

  TokenBatch next();

  // Batches this rank takes per epoch (train) or per pass (eval).
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t total_windows() const { return total_windows_; }
  // The epoch of the next batch.
  int64_t epoch() const { return epoch_; }
  const TokenLoaderOptions& options() const { return options_; }

  // restore(state()) followed by next() gives exactly the batches this loader would have given next.
  LoaderState state() const;
  void restore(const LoaderState& state);
  // Back to the first batch of epoch 0 (e.g. before each evaluation pass).
  void reset() { restore(state_at(0, 0)); }

 private:
  struct WindowStart {
    int64_t shard;
    int64_t offset;
  };
  WindowStart window_start(int64_t window) const;
  void build_epoch_order();
  void start_epoch_if_finished();
  LoaderState state_at(int64_t epoch, int64_t position) const;

  TokenLoaderOptions options_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // per shard: global index of its first window; back() = total
  std::vector<int64_t> stream_start_;  // per shard: stream position of its first token
  int64_t total_windows_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // this epoch's window order (train mode)
};

}  // namespace retort::data
