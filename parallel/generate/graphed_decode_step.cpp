#include "parallel/generate/graphed_decode_step.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/capture_arena.h"
#include "core/util/error.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/models/gpt_model.h"

#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"
#endif

namespace retort::generate {

using kernels::SamplerRowParams;

namespace {

// RETORT_DECODE_GRAPHS=0 (or off / false) turns graph decoding off for the whole process: the same binary then
// measures decoding with and without graphs.
bool graphs_allowed_by_environment() {
  const char* value = std::getenv("RETORT_DECODE_GRAPHS");
  if (!value) return true;
  const std::string v(value);
  return !(v == "0" || v == "off" || v == "false" || v == "OFF" || v == "FALSE");
}

}  // namespace

bool decode_graph_applies(const GptModel& model, bool requested) {
#ifdef RETORT_WITH_CUDA
  if (!requested || !graphs_allowed_by_environment()) return false;
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

struct GraphedDecodeStep::State {
  const GptModel& model;
  KvCache& cache;
  DType dtype;
  SamplingOptions sampling;
  SinglePassSampling pass;
  Device device;
  int64_t batch;
  cudaStream_t stream = nullptr;

  // Pinned host staging, filled before each step: [batch] SamplerRowParams, then [batch] ids, then [batch]
  // positions (i32). The device copy `inputs` has the same layout, in 4-byte words.
  void* host_in = nullptr;
  void* host_in_device = nullptr;  // host_in as the device addresses it
  size_t in_bytes = 0;
  Tensor inputs, ids, positions;
  // Pinned results of the sampler pass: [batch] packed winners (u64).
  void* host_out = nullptr;
  void* host_out_device = nullptr;
  size_t out_bytes = 0;
  Tensor winners, logits;  // device outputs of the step (logits: only for pass None)
  Tensor inv_freq;

  // The step's own tensors during the capture (sized by the eager first step): the graph then has no memory nodes.
  std::unique_ptr<CaptureArena> arena;
  size_t step_bytes = 0;
  cuda::CudaGraph graph;  // declared after the arena: destroyed before it
  int64_t nodes = 0;
  bool capture_failed = false;
  int64_t steps = 0;

  State(const GptModel& m, KvCache& c, DType d, const SamplingOptions& s)
      : model(m), cache(c), dtype(d), sampling(s), pass(single_pass_sampling(s)) {}

  ~State() {
    // The buffers may still be read by queued work; wait for it before handing the graph and the pinned pages back.
    if (stream) cudaStreamSynchronize(stream);
    if (host_in) cudaFreeHost(host_in);
    if (host_out) cudaFreeHost(host_out);
  }

  SamplerRowParams* host_params() const { return static_cast<SamplerRowParams*>(host_in); }
  int32_t* host_ids() const { return reinterpret_cast<int32_t*>(host_params() + batch); }
  int32_t* host_positions() const { return host_ids() + batch; }

  // A copy between a pinned buffer and the device: a kernel reading or writing the host pages through their device
  // addresses (`mapped`: the graph then holds kernels only, and the host's launch call of it takes half as long,
  // docs/benchmarks.md), or a copy node (RETORT_DECODE_GRAPH_COPIES=nodes) between `from` and `to`.
  void copy(const void* mapped_from, void* mapped_to, const void* from, void* to, size_t bytes,
            cudaMemcpyKind kind) const {
    if (kernels::cuda::copies_as_kernels())
      kernels::cuda::enqueue_word_copy(static_cast<const uint32_t*>(mapped_from), static_cast<uint32_t*>(mapped_to),
                                       static_cast<int64_t>(bytes / 4));
    else
      RETORT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, stream));
  }
  void copy_in() const {
    copy(host_in_device, inputs.raw_data(), host_in, inputs.raw_data(), in_bytes, cudaMemcpyHostToDevice);
  }
  void copy_out() const {
    copy(winners.raw_data(), host_out_device, winners.raw_data(), host_out, out_bytes, cudaMemcpyDeviceToHost);
  }

  // Everything one step does, enqueued on the compute stream: nothing here waits or touches pageable memory.
  void enqueue() {
    copy_in();
    // The step's own tensors (activations, the logits) are allocated and freed inside it: while capturing, from
    // the arena, at addresses the graph keeps.
    const Tensor step_logits = model.decode_step(ids, positions, inv_freq, cache, dtype);
    switch (pass) {
      case SinglePassSampling::Argmax:
        kernels::cuda::enqueue_argmax(step_logits, 0, winners.data<uint64_t>());
        copy_out();
        break;
      case SinglePassSampling::Gumbel:
        kernels::cuda::enqueue_best_gumbel(step_logits, 0, sampling.temperature, sampling.seed,
                                           static_cast<const SamplerRowParams*>(inputs.raw_data()),
                                           winners.data<uint64_t>());
        copy_out();
        break;
      case SinglePassSampling::None:
        RETORT_CUDA_CHECK(cudaMemcpyAsync(logits.raw_data(), step_logits.raw_data(), logits.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream));
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
        "activations",
        batch, nodes, graph.node_kinds(), arena->used() / 1048576.0);
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
  const int64_t B = s.batch;
  static_assert(sizeof(SamplerRowParams) == 16, "four words per row");
  s.in_bytes = static_cast<size_t>(B) * (sizeof(SamplerRowParams) + 2 * sizeof(int32_t));
  // Mapped into the device's address space: the step's kernels read the inputs and write the results there.
  RETORT_CUDA_CHECK(cudaHostAlloc(&s.host_in, s.in_bytes, cudaHostAllocMapped));
  RETORT_CUDA_CHECK(cudaHostGetDevicePointer(&s.host_in_device, s.host_in, 0));
  std::memset(s.host_in, 0, s.in_bytes);
  s.inputs = Tensor::zeros({6 * B}, DType::I32, s.device);
  s.ids = s.inputs.rows(4 * B, B).view({B, 1});
  s.positions = s.inputs.rows(5 * B, B).view({B, 1});
  s.out_bytes = static_cast<size_t>(B) * 8;
  RETORT_CUDA_CHECK(cudaHostAlloc(&s.host_out, s.out_bytes, cudaHostAllocMapped));
  RETORT_CUDA_CHECK(cudaHostGetDevicePointer(&s.host_out_device, s.host_out, 0));
  s.winners = Tensor::empty({2 * B}, DType::I32, s.device);  // B 64-bit words
  if (s.pass == SinglePassSampling::None) {
    const int64_t local_vocab = model.config().padded_vocab(1);
    s.logits = Tensor::empty({B, local_vocab}, compute_dtype, s.device);
  }
  s.inv_freq = model.rope_frequencies(s.device);
}

GraphedDecodeStep::~GraphedDecodeStep() = default;

std::vector<int32_t> GraphedDecodeStep::run(const std::vector<int32_t>& last, const std::vector<uint64_t>& row_keys) {
  State& s = *state_;
  const int64_t B = s.batch;
  RETORT_CHECK(static_cast<int64_t>(last.size()) == B && static_cast<int64_t>(row_keys.size()) == B,
               "GraphedDecodeStep::run: {} tokens and {} row keys for a batch of {}", last.size(), row_keys.size(), B);
  cuda::DeviceGuard guard(s.device);
  // The previous step has been waited for, so no copy is still reading the staging buffer.
  for (int64_t r = 0; r < B; ++r) {
    const int64_t position = s.cache.length(r);
    RETORT_INPUT_CHECK(position < s.cache.capacity(),
                       "sequence {} holds {} positions, all of its KV cache's {}: the context is full", r, position,
                       s.cache.capacity());
    s.host_params()[r] = SamplerRowParams{row_keys[static_cast<size_t>(r)], 0u, 0.f};
    s.host_ids()[r] = last[static_cast<size_t>(r)];
    s.host_positions()[r] = static_cast<int32_t>(position);
  }
  // The first step warms up eagerly; the second is captured (capture only records: the graph then runs it).
  if (s.steps >= 1 && !s.graph.ready() && !s.capture_failed) s.capture();
  if (s.graph.ready()) {
    s.graph.launch(s.stream);
  } else if (s.steps == 0) {
    const AllocationTally tally;  // sizes the capture's arena
    s.enqueue();
    s.step_bytes = tally.bytes();
  } else {
    s.enqueue();
  }
  ++s.steps;
  if (s.pass == SinglePassSampling::None) return sample_next_tokens(s.logits, s.sampling, row_keys);
  RETORT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  const auto* winners = static_cast<const uint64_t*>(s.host_out);
  return tokens_from_winners(std::vector<uint64_t>(winners, winners + B), s.pass);
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
std::vector<int32_t> GraphedDecodeStep::run(const std::vector<int32_t>&, const std::vector<uint64_t>&) {
  return {};
}
bool GraphedDecodeStep::graphed() const {
  return false;
}
int64_t GraphedDecodeStep::graph_nodes() const {
  return 0;
}

#endif

}  // namespace retort::generate
