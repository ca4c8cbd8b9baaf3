#pragma once
// The decode steps of generate_tokens on a GPU, captured once in a CUDA graph and replayed for every new token,
// two steps in flight.
//
// A decode step of a small model at a small batch is a few hundred tiny kernels, and launching them one by one from
// the host costs more than running them. Here the step is made static: the ids, positions and sampler row keys
// live in pinned host pages that the step's first kernel copies to a fixed device buffer; the model runs
// GptModel::decode_step (fixed shapes, positions read on the device, no host copy and no wait); the sampler's one
// shard pass (the argmax when greedy, the Gumbel-max draw when sampling without top_k / top_p) runs on the device
// and its per-row winners are copied into pinned pages by the step's last kernel (the pages are mapped into the
// device's address space: the graph holds kernels only, decode_step_io.h).
//
// With a single-pass sampler the host does not wait for a step before launching the next: each row of the next
// step is fed the token the step before drew for it, decoded from its winner on the device, and the host reads
// the step's tokens while the GPU already runs the next one. The pages hold two slots, one per step in flight;
// the positions and row keys of a step are known to the host in advance (a sequence's position grows by one a
// step), and a sequence that finished in the step the host has not read yet is fed once more, at a position inside
// its cache, and its draw is ignored. The host's work for a step (the wake-up, the callbacks, the next inputs, the
// launch) then overlaps the GPU's. top_k and top_p need several passes with host decisions in between: the graph
// then ends with the logits in a fixed device buffer, sample_next_tokens reads them, and one step is in flight.
//
// The first step runs eagerly (it warms the libraries the capture must not initialise: cuBLAS's kernels, lazily
// loaded modules); the second is captured and every later one replays the graph. Every kernel is the same as in
// the eager step, so the tokens are bit for bit those of decoding without a graph. A capture that fails (an
// operation that cannot be captured) is logged at debug level and the steps keep running eagerly, with the same
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
  ~GraphedDecodeStep();  // waits for the steps in flight
  GraphedDecodeStep(const GraphedDecodeStep&) = delete;
  GraphedDecodeStep& operator=(const GraphedDecodeStep&) = delete;

  // How many launched steps may wait to be collected: 2 with a single-pass sampler, 1 with top_k / top_p, with the
  // copy nodes of RETORT_DECODE_GRAPH_COPIES=nodes, or with RETORT_DECODE_PIPELINE=0 in the environment (the host
  // then waits for every step before it launches the next: the same tokens, for measurements).
  int64_t depth() const;
  int64_t in_flight() const;

  // Enqueues the next step: row r is fed ids[r], or, when ids is empty, the token the step before drew for it
  // (depth 2 only), at positions[r] (below the cache's capacity), and draws with row_keys[r]. Does not wait; at
  // most depth() steps in flight.
  void launch(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
              const std::vector<uint64_t>& row_keys);
  // Waits for the oldest step in flight and returns every row's token from it.
  std::vector<int32_t> collect();
  // Waits for the steps in flight and drops their tokens.
  void drain();

  // Whether the steps now replay a graph, and its node count (0 before the capture or after a failed one).
  bool graphed() const;
  int64_t graph_nodes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace retort::generate
