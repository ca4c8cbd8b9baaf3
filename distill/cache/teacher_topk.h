#pragma once
// Teacher top-k generation: runs the teacher once over a token dataset and writes the top-k cache
// (distill/topk_cache.h) that off-policy distillation trains from.
//
// The dataset's token shards are read in order as one stream of P tokens, cut into windows of T = seq_len
// tokens at positions [w T, (w + 1) T), w < P / T (the last partial window is left out). The teacher sees
// batches of up to batch_size windows; row (b, t) of its output is the distribution after the token at
// position w_b T + t, and becomes the cache row of that position. The cache covers [0, (P / T) T), so a
// student must cut its windows the same way to read rows in step with its token batches.
//
// Every rank of the tp group runs the teacher and the distributed top-k (or the distributed sampler of
// teacher_sample.h for a sampled cache); rank 0 writes. A run that finds a
// partly written cache of the same settings resumes at its first missing shard.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distill/cache/topk_cache.h"
#include "parallel/comm/communicator.h"

namespace retort::distill {

// The teacher's forward: tokens i32 [B, T] on options.device -> logits [B, T, V_local] (f32 or bf16), split on
// the vocabulary over the tp group (rank r holds ids [r V_local, (r + 1) V_local)).
using TeacherLogitsFn = std::function<Tensor(const Tensor& tokens)>;

struct TeacherTopKDataset {
  std::vector<std::filesystem::path> shards;  // token shards (core/data/token_shard.h), read in this order
  int64_t vocab_size = 0;                     // of the tokenizer that made them
};

struct TeacherTopKOptions {
  int k = 64;                        // top-k: entries per token; sampled: draws per token (K)
  CacheKind kind = CacheKind::TopK;  // Sampled: K ids drawn from the teacher (teacher_sample.h) instead of its top-k
  double sample_temperature = 1.0;   // sampled: the proposal temperature t (r ~ p^(1/t))
  uint64_t sample_seed = 0;          // sampled: the seed of the draws
  CacheValueType dtype = CacheValueType::BF16;
  int64_t batch_size = 8;  // windows per teacher call
  int64_t seq_len = 256;   // T
  std::filesystem::path output_dir;
  int64_t shard_tokens = 1 << 20;  // cache rows per shard file
  double temperature = 1.0;        // the cache holds log softmax(logits / temperature)
  std::string tokenizer_id;        // recorded in the cache; the student's must match
  int64_t vocab = 0;               // the teacher's full vocabulary (tp x V_local)
  Device device = Device::cpu();   // where token batches are placed for the teacher
  // The tp group the logits are split over (rank 0 writes, the resume point is broadcast over it); null when
  // the teacher runs on one rank.
  std::shared_ptr<Communicator> group;
  int64_t log_every = 50;  // teacher calls between progress lines
};

struct TeacherTopKReport {
  int64_t cache_tokens = 0;     // rows of the finished cache
  int64_t resumed_tokens = 0;   // rows found on disk at the start
  int64_t computed_tokens = 0;  // rows computed by this run
  double seconds = 0;
  double tokens_per_second = 0;
};

TeacherTopKReport generate_teacher_topk(const TeacherLogitsFn& teacher, const TeacherTopKDataset& dataset,
                                        const TeacherTopKOptions& options);

}  // namespace retort::distill
