#pragma once
// One decode step of generate_tokens on a GPU, captured once in a CUDA graph and replayed for every new token.
//
// A decode step of a small model at a small batch is a few hundred tiny kernels, and launching them one by one from
// the host costs more than running them. Here the step is made static: the ids, positions and sampler row keys
// live in one pinned host buffer that the host fills before each step and that the step's first kernel copies to a
// fixed device buffer; the model runs GptModel::decode_step (fixed shapes, positions read on the device, no host
// copy and no wait); the sampler's one shard pass (the argmax when greedy, the Gumbel-max draw when sampling
// without top_k / top_p) runs on the device and its per-row results are copied into pinned memory by the step's
// last kernel (the pinned buffers are mapped into the device's address space: the graph holds kernels only). The
// host then waits once, turns the results into tokens exactly as sample_next_tokens does, and advances the cache's
// lengths. top_k and top_p need several passes with host decisions in between: the graph then ends with the logits
// in a fixed device buffer and sample_next_tokens reads them.
//
// The first step runs eagerly (it warms the libraries the capture must not initialise: cuBLAS's kernels, lazily
// loaded modules); the second is captured and every later one replays the graph. Every kernel is the same as in
// the eager step, so the tokens are bit for bit those of decoding without a graph. A capture that fails (an
// operation that cannot be captured) is logged at debug level and the step keeps running eagerly, with the same
// tokens.
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/generate/vocab_sampler.h"

namespace retort {
class GptModel;
}

namespace retort::generate {

class KvCache;

// Whether generate_tokens decodes with a CUDA graph: on a GPU, without a tp group (the collectives of a sharded
// step are left to the eager path), unless RETORT_DECODE_GRAPHS=0 in the environment or the caller turned
// GenerationOptions::cuda_graphs off.
bool decode_graph_applies(const GptModel& model, bool requested);

class GraphedDecodeStep {
 public:
  // model: dense (no tp group), on a GPU, usually the bf16 inference copy; cache: its KV cache (the graph records
  // the cache's device addresses, so both must outlive this object and the cache must not be reallocated).
  GraphedDecodeStep(const GptModel& model, KvCache& cache, DType compute_dtype, const SamplingOptions& sampling);
  ~GraphedDecodeStep();
  GraphedDecodeStep(const GraphedDecodeStep&) = delete;
  GraphedDecodeStep& operator=(const GraphedDecodeStep&) = delete;

  // Feeds last[r] to row r at position cache.length(r) and returns every row's next token, drawn with
  // row_keys[r]. Does not advance the cache (the caller does, with the rows that took a token).
  std::vector<int32_t> run(const std::vector<int32_t>& last, const std::vector<uint64_t>& row_keys);

  // Whether the steps now replay a graph, and its node count (0 before the capture or after a failed one).
  bool graphed() const;
  int64_t graph_nodes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace retort::generate
