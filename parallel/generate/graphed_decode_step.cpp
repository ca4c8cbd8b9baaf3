#include "parallel/generate/graphed_decode_step.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/capture_arena.h"
#include "core/util/environment_switch.h"
#include "core/util/error.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/models/gpt_model.h"

#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"
#include "parallel/generate/decode_step_io.h"
#endif

namespace retort::generate {

using kernels::SamplerRowParams;

bool decode_graph_applies(const GptModel& model, bool requested) {
#ifdef RETORT_WITH_CUDA
  // RETORT_DECODE_GRAPHS=0 turns graph decoding off for the whole process: the same binary then measures decoding
  // with and without graphs.
  if (!requested || switched_off_in_environment("RETORT_DECODE_GRAPHS")) return false;
  if (model.tp_group()) return false;
  const auto params = model.named_parameters();
  return !params.empty() && params.front().second.device().is_cuda();
#else
  (void)model;
  (void)requested;
  return false;
#endif
}

#ifdef RETORT_WITH_CUDA

namespace {

constexpr int kSlots = 2;  // one per step in flight

}  // namespace

struct GraphedDecodeStep::State {
  const GptModel& model;
  KvCache& cache;
  DType dtype;
  SamplingOptions sampling;
  SinglePassSampling pass;
  Device device;
  int64_t batch;
  int64_t depth = 1;
  int32_t vocab = 0;
  cudaStream_t stream = nullptr;
  // Whether the step's first and last kernels move the inputs and winners (the default; they alternate between
  // the pages' two slots, and the first also clears the winners for the sampler pass) or copy nodes do
  // (RETORT_DECODE_GRAPH_COPIES=nodes: slot 0 every step, one in flight, the sampler clearing its own winners).
  bool io_kernels = true;

  // Pinned host pages, mapped into the device's address space: kSlots input slots of step_input_words(batch)
  // words (decode_step_io.h), and kSlots result slots of batch packed winners.
  uint32_t* host_in = nullptr;
  void* host_in_device = nullptr;
  uint64_t* host_out = nullptr;
  void* host_out_device = nullptr;
  int64_t in_words = 0;
  // The device copy of a slot; ids and positions are views of it. steps_run: the device's count of the steps it
  // ran, which picks the slot.
  Tensor inputs, ids, positions, steps_run;
  Tensor winners, logits;  // device outputs of the step (logits: only for pass None)
  Tensor inv_freq;
  cudaEvent_t done[kSlots] = {nullptr, nullptr};  // recorded after each slot's latest step
  std::vector<uint64_t> row_keys[kSlots];         // pass None: the keys its host-side draw needs
  int64_t launched = 0, collected = 0;

  // The step's own tensors during the capture (sized by the eager first step): the graph then has no memory nodes.
  std::unique_ptr<CaptureArena> arena;
  size_t step_bytes = 0;
  cuda::CudaGraph graph;  // declared after the arena: destroyed before it
  int64_t nodes = 0;
  bool capture_failed = false;

  State(const GptModel& m, KvCache& c, DType d, const SamplingOptions& s)
      : model(m), cache(c), dtype(d), sampling(s), pass(single_pass_sampling(s)) {}

  ~State() {
    // The pages may still be read by queued work; wait for it before handing the graph and the pages back.
    if (stream) cudaStreamSynchronize(stream);
    for (cudaEvent_t e : done)
      if (e) cudaEventDestroy(e);
    if (host_in) cudaFreeHost(host_in);
    if (host_out) cudaFreeHost(host_out);
  }

  int slot_of(int64_t step) const { return io_kernels ? static_cast<int>(step % kSlots) : 0; }
  uint32_t* slot_in(int slot) const { return host_in + slot * in_words; }
  SamplerRowParams* slot_params(int slot) const { return reinterpret_cast<SamplerRowParams*>(slot_in(slot)); }
  int32_t* slot_ids(int slot) const {
    return reinterpret_cast<int32_t*>(slot_in(slot) + kernels::cuda::step_input_ids_at(batch));
  }
  int32_t* slot_positions(int slot) const { return slot_ids(slot) + batch; }
  uint32_t& slot_ids_from_host(int slot) const { return slot_in(slot)[in_words - 1]; }

  void stage_inputs() const {
    if (io_kernels)
      kernels::cuda::enqueue_stage_step_inputs(
          static_cast<const uint32_t*>(host_in_device), static_cast<uint32_t*>(inputs.raw_data()), batch,
          static_cast<const uint32_t*>(steps_run.raw_data()), winners.data<uint64_t>(), vocab);
    else
      RETORT_CUDA_CHECK(cudaMemcpyAsync(inputs.raw_data(), host_in, static_cast<size_t>(in_words) * 4,
                                        cudaMemcpyHostToDevice, stream));
  }
  // rows 0 (pass None): only counts the step, so that the slots stay in step with the host's count.
  void publish_winners(int64_t rows) const {
    if (io_kernels)
      kernels::cuda::enqueue_publish_step_winners(winners.data<uint64_t>(), static_cast<uint64_t*>(host_out_device),
                                                  rows, static_cast<uint32_t*>(steps_run.raw_data()));
    else if (rows > 0)
      RETORT_CUDA_CHECK(
          cudaMemcpyAsync(host_out, winners.raw_data(), static_cast<size_t>(rows) * 8, cudaMemcpyDeviceToHost, stream));
  }

  // Everything one step does, enqueued on the compute stream: nothing here waits or touches pageable memory.
  void enqueue() {
    stage_inputs();
    // The step's own tensors (activations, the logits) are allocated and freed inside it: while capturing, from
    // the arena, at addresses the graph keeps.
    const Tensor step_logits = model.decode_step(ids, positions, inv_freq, cache, dtype);
    switch (pass) {
      case SinglePassSampling::Argmax:
        kernels::cuda::enqueue_argmax(step_logits, 0, winners.data<uint64_t>(), io_kernels);
        publish_winners(batch);
        break;
      case SinglePassSampling::Gumbel:
        kernels::cuda::enqueue_best_gumbel(step_logits, 0, sampling.temperature, sampling.seed,
                                           static_cast<const SamplerRowParams*>(inputs.raw_data()),
                                           winners.data<uint64_t>(), io_kernels);
        publish_winners(batch);
        break;
      case SinglePassSampling::None:
        RETORT_CUDA_CHECK(cudaMemcpyAsync(logits.raw_data(), step_logits.raw_data(), logits.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream));
        publish_winners(0);
        break;
    }
  }

  // Records enqueue() into a graph; on any failure the steps go on eagerly.
  void capture() {
    // A quarter more than the eager step allocated, for allocations whose size the capture changes.
    arena = std::make_unique<CaptureArena>(device, step_bytes + step_bytes / 4 + (1 << 20));
    std::string failure;
    {
      const CaptureArena::Scope scope(*arena);
      graph = cuda::CudaGraph::record(
          stream, [this] { enqueue(); }, &failure);
    }
    if (!graph.ready()) {
      capture_failed = true;
      arena.reset();
      spdlog::debug("generation: the decode step could not be captured in a CUDA graph ({}); decoding without one",
                    failure);
      return;
    }
    nodes = graph.nodes();
    spdlog::debug(
        "generation: the decode step of {} sequences is one CUDA graph of {} nodes ({}), {:.1f} MiB of "
        "activations, {} step(s) in flight",
        batch, nodes, graph.node_kinds(), arena->used() / 1048576.0, depth);
  }
};

GraphedDecodeStep::GraphedDecodeStep(const GptModel& model, KvCache& cache, DType compute_dtype,
                                     const SamplingOptions& sampling)
    : state_(std::make_unique<State>(model, cache, compute_dtype, sampling)) {
  State& s = *state_;
  RETORT_CHECK(!model.tp_group(), "GraphedDecodeStep: a model with a tp group decodes without a graph");
  s.device = model.named_parameters().front().second.device();
  RETORT_CHECK(s.device.is_cuda(), "GraphedDecodeStep needs a model on a GPU, got one on {}", s.device.str());
  cuda::DeviceGuard guard(s.device);
  s.stream = cuda::compute_stream(s.device.index);
  s.batch = cache.batch();
  s.vocab = static_cast<int32_t>(model.config().vocab_size);
  s.io_kernels = kernels::cuda::copies_as_kernels();
  // RETORT_DECODE_PIPELINE=0: the host waits for every step before launching the next.
  const bool pipelined = !switched_off_in_environment("RETORT_DECODE_PIPELINE");
  s.depth = s.pass != SinglePassSampling::None && s.io_kernels && pipelined ? 2 : 1;
  const int64_t B = s.batch;
  s.in_words = kernels::cuda::step_input_words(B);
  const size_t in_bytes = static_cast<size_t>(kSlots * s.in_words) * 4, out_bytes = static_cast<size_t>(kSlots * B) * 8;
  RETORT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s.host_in), in_bytes, cudaHostAllocMapped));
  RETORT_CUDA_CHECK(cudaHostGetDevicePointer(&s.host_in_device, s.host_in, 0));
  std::memset(s.host_in, 0, in_bytes);
  RETORT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s.host_out), out_bytes, cudaHostAllocMapped));
  RETORT_CUDA_CHECK(cudaHostGetDevicePointer(&s.host_out_device, s.host_out, 0));
  s.inputs = Tensor::zeros({s.in_words}, DType::I32, s.device);
  const int64_t ids_at = kernels::cuda::step_input_ids_at(B);
  s.ids = s.inputs.rows(ids_at, B).view({B, 1});
  s.positions = s.inputs.rows(ids_at + B, B).view({B, 1});
  s.steps_run = Tensor::zeros({1}, DType::I32, s.device);
  s.winners = Tensor::zeros({2 * B}, DType::I32, s.device);  // B 64-bit words
  if (s.pass == SinglePassSampling::None) {
    const int64_t local_vocab = model.config().padded_vocab(1);
    s.logits = Tensor::empty({B, local_vocab}, compute_dtype, s.device);
  }
  s.inv_freq = model.rope_frequencies(s.device);
  for (cudaEvent_t& e : s.done) RETORT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

GraphedDecodeStep::~GraphedDecodeStep() = default;

int64_t GraphedDecodeStep::depth() const {
  return state_->depth;
}

int64_t GraphedDecodeStep::in_flight() const {
  return state_->launched - state_->collected;
}

void GraphedDecodeStep::launch(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                               const std::vector<uint64_t>& row_keys) {
  State& s = *state_;
  const int64_t B = s.batch;
  RETORT_CHECK(static_cast<int64_t>(positions.size()) == B && static_cast<int64_t>(row_keys.size()) == B &&
                   (ids.empty() || static_cast<int64_t>(ids.size()) == B),
               "GraphedDecodeStep::launch: {} ids, {} positions and {} row keys for a batch of {}", ids.size(),
               positions.size(), row_keys.size(), B);
  RETORT_CHECK(in_flight() < s.depth, "GraphedDecodeStep::launch: {} steps in flight already, at most {}", in_flight(),
               s.depth);
  RETORT_CHECK(!ids.empty() || (s.depth > 1 && s.launched > 0),
               "GraphedDecodeStep::launch: the ids may come from the step before only when steps pipeline and one "
               "ran");
  cuda::DeviceGuard guard(s.device);
  // The slot's previous step has been collected, so nothing still reads it.
  const int slot = s.slot_of(s.launched);
  for (int64_t r = 0; r < B; ++r) {
    const int32_t position = positions[static_cast<size_t>(r)];
    RETORT_CHECK(position >= 0 && position < s.cache.capacity(),
                 "GraphedDecodeStep::launch: sequence {} fed at position {}, outside its KV cache of {}", r, position,
                 s.cache.capacity());
    s.slot_params(slot)[r] = SamplerRowParams{row_keys[static_cast<size_t>(r)], 0u, 0.f};
    s.slot_ids(slot)[r] = ids.empty() ? 0 : ids[static_cast<size_t>(r)];
    s.slot_positions(slot)[r] = position;
  }
  s.slot_ids_from_host(slot) = ids.empty() ? 0u : 1u;
  if (s.pass == SinglePassSampling::None) s.row_keys[slot] = row_keys;
  // The first step warms up eagerly; the second is captured (capture only records: the graph then runs it).
  if (s.launched >= 1 && !s.graph.ready() && !s.capture_failed) s.capture();
  if (s.graph.ready()) {
    s.graph.launch(s.stream);
  } else if (s.launched == 0) {
    const AllocationTally tally;  // sizes the capture's arena
    s.enqueue();
    s.step_bytes = tally.bytes();
  } else {
    s.enqueue();
  }
  RETORT_CUDA_CHECK(cudaEventRecord(s.done[slot], s.stream));
  ++s.launched;
}

std::vector<int32_t> GraphedDecodeStep::collect() {
  State& s = *state_;
  RETORT_CHECK(in_flight() > 0, "GraphedDecodeStep::collect: no step in flight");
  cuda::DeviceGuard guard(s.device);
  const int slot = s.slot_of(s.collected);
  ++s.collected;
  if (s.pass == SinglePassSampling::None) return sample_next_tokens(s.logits, s.sampling, s.row_keys[slot]);
  RETORT_CUDA_CHECK(cudaEventSynchronize(s.done[slot]));
  const uint64_t* winners = s.host_out + slot * s.batch;
  return tokens_from_winners(std::vector<uint64_t>(winners, winners + s.batch), s.pass);
}

void GraphedDecodeStep::drain() {
  State& s = *state_;
  cuda::DeviceGuard guard(s.device);
  RETORT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.collected = s.launched;
}

bool GraphedDecodeStep::graphed() const {
  return state_->graph.ready();
}

int64_t GraphedDecodeStep::graph_nodes() const {
  return state_->nodes;
}

#else  // no CUDA: never constructed (decode_graph_applies is false), but the declarations must link.

struct GraphedDecodeStep::State {};

GraphedDecodeStep::GraphedDecodeStep(const GptModel&, KvCache&, DType, const SamplingOptions&) {
  throw Error("GraphedDecodeStep: this retort build has no CUDA backend");
}
GraphedDecodeStep::~GraphedDecodeStep() = default;
int64_t GraphedDecodeStep::depth() const {
  return 1;
}
int64_t GraphedDecodeStep::in_flight() const {
  return 0;
}
void GraphedDecodeStep::launch(const std::vector<int32_t>&, const std::vector<int32_t>&, const std::vector<uint64_t>&) {
}
std::vector<int32_t> GraphedDecodeStep::collect() {
  return {};
}
void GraphedDecodeStep::drain() {}
bool GraphedDecodeStep::graphed() const {
  return false;
}
int64_t GraphedDecodeStep::graph_nodes() const {
  return 0;
}

#endif

}  // namespace retort::generate
