#include "distill/train/graphed_train_step.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/util/error.h"
#include "optim/grad_norm_on_device.h"

#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"
#include "core/tensor/capture_arena.h"
#endif

namespace retort::distill {

std::optional<std::string> graphed_step_refusal(Device device, int tp_size, int dp_size, const std::string& optimizer,
                                                bool objective_graphable) {
#ifndef RETORT_WITH_CUDA
  (void)device, (void)tp_size, (void)dp_size, (void)optimizer, (void)objective_graphable;
  return std::string("this build has no CUDA backend");
#else
  if (!device.is_cuda()) return std::string("the run is on the CPU");
  if (tp_size > 1 || dp_size > 1)
    return "the run has " + std::to_string(tp_size * dp_size) +
           " ranks (graphed steps are recorded for one GPU without collectives)";
  if (optimizer != "adamw") return "the optimizer is " + optimizer + " (graphed steps update with adamw)";
  if (!objective_graphable)
    return std::string(
        "the objective's loss cannot be recorded (an online teacher, on-policy batches, another tokenizer's teacher, "
        "or label smoothing or z-loss reported beside the loss)");
  return std::nullopt;
#endif
}

namespace {

// A small block of host memory the graphs copy from or to: pinned on a GPU (a graph's copy node needs page-locked
// memory, and reads it when replayed, not when recorded), plain on the CPU.
class HostStaging {
 public:
  HostStaging(size_t bytes, Device device) : bytes_(bytes), pinned_(device.is_cuda()) {
#ifdef RETORT_WITH_CUDA
    if (pinned_) {
      RETORT_CUDA_CHECK(cudaMallocHost(&data_, bytes_));
      std::memset(data_, 0, bytes_);
      return;
    }
#endif
    plain_.assign(bytes_, 0);
    data_ = plain_.data();
  }
  ~HostStaging() {
#ifdef RETORT_WITH_CUDA
    if (pinned_ && data_) cudaFreeHost(data_);
#endif
  }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void* data() const {
    return data_;
  }
  size_t bytes() const {
    return bytes_;
  }

 private:
  size_t bytes_;
  bool pinned_;
  void* data_ = nullptr;
  std::vector<char> plain_;
};

}  // namespace

struct GraphedTrainStep::State {
  GptModel& model;
  optim::AdamW& optimizer;
  GraphedStepOptions options;
  Device device;
  int64_t tokens_per_micro;
  std::shared_ptr<const GraphableLoss> loss;
  int64_t values;  // 0-dim values the loss reports beside itself
  // The inputs of one micro-batch (i32), the update's AdamWDeviceScalars, and the results (loss, norm, the loss's
  // values).
  HostStaging host_ids, host_scalars;
  std::unique_ptr<HostStaging> host_results;  // made with `results`, at the first micro-batch
  Tensor inputs, scalars, results;
  // The loss's targets: their pinned host copies and their device tensors.
  std::vector<std::unique_ptr<HostStaging>> host_targets;
  std::vector<Tensor> targets;
  std::map<std::string, double> last_metrics;
  std::vector<Tensor> grads;  // the gradients the update reads, found after the first backward
#ifdef RETORT_WITH_CUDA
  // One recorded part of the step: its graph, and the arena its tensors come from (sized from the eager first call's
  // peak, reusing freed blocks, so the graph has no memory nodes: at GPT-2 scale the pool's allocation and free
  // nodes cost more than the kernel launches a graph saves).
  struct Part {
    std::unique_ptr<CaptureArena> arena;  // declared first: destroyed after the graph that uses it
    cuda::CudaGraph graph;
    size_t eager_peak = 0;
  };
  // The first micro-batch of a step writes over the gradients, the others add to them: two graphs.
  Part first_micro_part, later_micro_part, update_part;
#endif
  int64_t first_micro_calls = 0, later_micro_calls = 0, update_calls = 0;
  int64_t micro_in_step = 0;  // micro-batches since the last update
  bool recording_failed = false;
  std::string fallback_reason;

  State(GptModel& m, optim::AdamW& o, const GraphedStepOptions& opt, Device d)
      : model(m),
        optimizer(o),
        options(opt),
        device(d),
        tokens_per_micro(opt.batch * opt.seq),
        loss(opt.loss ? opt.loss : graphable_cross_entropy({})),
        values(0),
        host_ids(static_cast<size_t>(opt.batch * opt.seq) * sizeof(int32_t), d),
        host_scalars(sizeof(optim::AdamWDeviceScalars), d) {
    inputs = Tensor::zeros({opt.batch, opt.seq}, DType::I32, device);
    scalars = Tensor::zeros({4}, DType::F32, device);
    for (const StagedTensor& t : loss->targets(opt.batch, opt.seq)) {
      targets.push_back(Tensor::zeros(t.shape, t.dtype, device));
      host_targets.push_back(std::make_unique<HostStaging>(targets.back().nbytes(), device));
    }
  }

  // The results' layout is known once the loss has reported its values (at the first micro-batch).
  void size_results(int64_t count) {
    values = count;
    results = Tensor::zeros({2 + count}, DType::F32, device);
    host_results = std::make_unique<HostStaging>(static_cast<size_t>(2 + count) * sizeof(float), device);
  }

  // Host staging -> device tensor (enqueued: a graph records the copy and repeats it on every replay).
  void copy_in(Tensor& to, const HostStaging& from) {
    if (device.is_cpu()) {
      std::memcpy(to.raw_data(), from.data(), from.bytes());
      return;
    }
#ifdef RETORT_WITH_CUDA
    RETORT_CUDA_CHECK(cudaMemcpyAsync(to.raw_data(), from.data(), from.bytes(), cudaMemcpyHostToDevice,
                                      cuda::compute_stream(device.index)));
#endif
  }
  void copy_out(HostStaging& to, size_t offset, const Tensor& from) {
    char* dst = static_cast<char*>(to.data()) + offset;
    if (device.is_cpu()) {
      std::memcpy(dst, from.raw_data(), from.nbytes());
      return;
    }
#ifdef RETORT_WITH_CUDA
    RETORT_CUDA_CHECK(cudaMemcpyAsync(dst, from.raw_data(), from.nbytes(), cudaMemcpyDeviceToHost,
                                      cuda::compute_stream(device.index)));
#endif
  }
  void wait() {
#ifdef RETORT_WITH_CUDA
    if (device.is_cuda()) RETORT_CUDA_CHECK(cudaStreamSynchronize(cuda::compute_stream(device.index)));
#endif
  }
  float result(int index) const {
    return static_cast<const float*>(host_results->data())[index];
  }

  // One micro-batch: every call is the same device work on the same buffers, so a graph can repeat it.
  void enqueue_micro() {
    copy_in(inputs, host_ids);
    for (size_t i = 0; i < targets.size(); ++i) copy_in(targets[i], *host_targets[i]);
    const Tensor logits = model.forward(inputs, options.compute_dtype);
    const GraphedLoss out = loss->loss(logits, targets);
    if (!results.defined()) size_results(static_cast<int64_t>(out.values.size()));
    RETORT_CHECK(static_cast<int64_t>(out.values.size()) == values,
                 "GraphedTrainStep: the loss reported {} values, then {}", values, out.values.size());
    results.rows(0, 1).copy_(out.loss.to(DType::F32).view({1}));
    for (int64_t i = 0; i < values; ++i) results.rows(2 + i, 1).copy_(out.values[i].to(DType::F32).view({1}));
    const Tensor scaled =
        options.grad_accum == 1 ? out.loss : ops::scale(out.loss, 1.0 / static_cast<double>(options.grad_accum));
    scaled.backward();
    copy_out(*host_results, 0, results.rows(0, 1));
    if (values > 0) copy_out(*host_results, 2 * sizeof(float), results.rows(2, values));
  }

  void enqueue_update() {
    NoGradGuard no_grad;
    copy_in(scalars, host_scalars);
    float* s = scalars.data<float>();
    optim::grad_norm_and_clip_factor(grads, options.max_norm, results.data<float>() + 1, s + 3, device);
    optimizer.enqueue_update_from_device(s);
    copy_out(*host_results, sizeof(float), results.rows(1, 1));
  }

  // The first two calls of each part run eagerly (they make what the graph will reuse and measure its memory), the
  // third records the graph, and every call from then on replays it; on the CPU, with recording off or after a
  // failed recording, every call is eager.
#ifdef RETORT_WITH_CUDA
  void run(Part& part, int64_t& calls, const std::function<void()>& work, const char* name) {
    ++calls;
    if (device.is_cpu() || !options.record_graphs || recording_failed) return work();
    if (calls <= 2) {
      // The first call makes what persists (the gradients, the working copies); the second, in the steady state,
      // measures the peak the recorded work will need.
      if (calls == 1) return work();
      const AllocationTally tally;
      work();
      part.eager_peak = tally.peak_bytes();
      return;
    }
    cudaStream_t stream = cuda::compute_stream(device.index);
    if (!part.graph.ready()) {
      if (calls == 3) release_cached_blocks();
      // The eager peak and a sixteenth more for the fragmentation of another order of frees; if that is not enough,
      // once more with half the peak to spare.
      std::string why;
      for (const size_t spare : {part.eager_peak / 16, part.eager_peak / 2}) {
        part.arena = std::make_unique<CaptureArena>(device, part.eager_peak + spare + (64 << 20),
                                                    CaptureArena::Reuse::kAfterFree);
        {
          const CaptureArena::Scope scope(*part.arena);
          part.graph = cuda::CudaGraph::record(stream, work, &why);
        }
        if (part.graph.ready() || why.find("CaptureArena") == std::string::npos) break;
        part.arena.reset();
      }
      if (!part.graph.ready()) {
        drop_graphs();
        recording_failed = true;
        fallback_reason = fmt::format("the {} could not be recorded as a CUDA graph: {}", name, why);
        spdlog::warn("train: {}; the steps run without graphs", fallback_reason);
        return work();
      }
      spdlog::info(
          "train: the {} is one CUDA graph of {} nodes ({}), {:.1f} MiB of activations in an arena of {:.1f} MiB", name,
          part.graph.nodes(), part.graph.node_kinds(), part.arena->used() / 1048576.0,
          part.arena->capacity() / 1048576.0);
    }
    part.graph.launch(stream);
  }

  // Graphs first: they use their arenas' memory.
  void drop_graphs() {
    wait();
    for (Part* part : {&first_micro_part, &later_micro_part, &update_part}) {
      part->graph = cuda::CudaGraph();
      part->arena.reset();
    }
  }

  // The eager first step's activations sit freed in the stream-ordered pool (which keeps what it frees); a graph
  // takes its memory from its own pool, so without this the device would hold both.
  void release_cached_blocks() {
    wait();
    cudaMemPool_t pool = nullptr;
    RETORT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device.index));
    RETORT_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  }
#endif
};

GraphedTrainStep::GraphedTrainStep(GptModel& model, optim::AdamW& optimizer, const GraphedStepOptions& options,
                                   Device device)
    : state_(std::make_unique<State>(model, optimizer, options, device)) {
  RETORT_CHECK(options.batch > 0 && options.seq > 0 && options.grad_accum > 0,
               "GraphedTrainStep: batch {}, seq {} and grad_accum {} must be positive", options.batch, options.seq,
               options.grad_accum);
}

GraphedTrainStep::~GraphedTrainStep() {
  // Queued replays may still read the staging buffers and the graphs' memory.
  if (state_) state_->wait();
}

double GraphedTrainStep::micro_batch(const data::TokenBatch& batch) {
  State& s = *state_;
  RETORT_CHECK(batch.batch == s.options.batch && batch.seq == s.options.seq,
               "GraphedTrainStep: a micro-batch of {} x {} for steps recorded at {} x {}", batch.batch, batch.seq,
               s.options.batch, s.options.seq);
  // The ids are checked here, on the host, because the graph's loss cannot stop on a bad one.
  const int64_t vocab = s.model.config().vocab_size;
  for (size_t i = 0; i < batch.inputs.size(); ++i)
    RETORT_INPUT_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < vocab,
                       "input id {} at position {} is outside the vocabulary of {}: the data and the model disagree "
                       "on the vocabulary",
                       batch.inputs[i], i, vocab);
  std::vector<void*> staged_targets;
  for (const auto& host : s.host_targets) staged_targets.push_back(host->data());
  s.loss->stage(batch, vocab, staged_targets);
  std::memcpy(s.host_ids.data(), batch.inputs.data(), batch.inputs.size() * sizeof(int32_t));
  const bool first = s.micro_in_step == 0;
  // The first backward after an update writes over the gradients (recorded as copies, so every replay does the
  // same): no zeroing pass, no addition to zeros. The marks are part of the work, so a recording that fails halfway
  // (after the backward cleared some) leaves the eager retry correct.
  const auto first_work = [&s] {
    for (Tensor p : s.model.parameters()) p.mark_grad_stale();
    s.enqueue_micro();
  };
#ifdef RETORT_WITH_CUDA
  if (first)
    s.run(s.first_micro_part, s.first_micro_calls, first_work, "first micro-batch of a step (forward, loss, backward)");
  else
    s.run(
        s.later_micro_part, s.later_micro_calls, [&s] { s.enqueue_micro(); },
        "later micro-batch of a step (forward, loss, backward)");
#else
  if (first)
    first_work();
  else
    s.enqueue_micro();
#endif
  ++s.micro_in_step;
  s.wait();  // the loss, and the staging buffers free for the next micro-batch
  std::vector<double> values;
  for (int64_t i = 0; i < s.values; ++i) values.push_back(s.result(static_cast<int>(2 + i)));
  s.last_metrics = s.loss->metrics(s.result(0), values);
  if (s.grads.empty()) {
    for (const auto& group : s.optimizer.groups())
      for (const auto& [name, p] : group.params)
        if (p.grad().defined()) s.grads.push_back(p.grad());
  }
  return s.result(0);
}

double GraphedTrainStep::update(double lr) {
  State& s = *state_;
  RETORT_CHECK(!s.grads.empty(), "GraphedTrainStep::update before any micro_batch: there are no gradients");
  const auto [c1, c2] = s.optimizer.next_bias_corrections();
  *static_cast<optim::AdamWDeviceScalars*>(s.host_scalars.data()) =
      optim::AdamWDeviceScalars{static_cast<float>(lr), static_cast<float>(c1), static_cast<float>(c2), 1.0f};
#ifdef RETORT_WITH_CUDA
  s.run(
      s.update_part, s.update_calls, [&s] { s.enqueue_update(); }, "update (norm, clip, AdamW)");
#else
  s.enqueue_update();
#endif
  s.wait();
  s.micro_in_step = 0;
  s.optimizer.advance_step();
  return s.result(1);
}

bool GraphedTrainStep::graphed() const {
#ifdef RETORT_WITH_CUDA
  const State& s = *state_;
  const bool micro_ready =
      s.first_micro_part.graph.ready() && (s.options.grad_accum == 1 || s.later_micro_part.graph.ready());
  return micro_ready && s.update_part.graph.ready() && !s.recording_failed;
#else
  return false;
#endif
}

const std::map<std::string, double>& GraphedTrainStep::last_metrics() const {
  return state_->last_metrics;
}

const std::string& GraphedTrainStep::fallback_reason() const {
  return state_->fallback_reason;
}

int64_t GraphedTrainStep::graph_nodes() const {
#ifdef RETORT_WITH_CUDA
  const State& s = *state_;
  return s.first_micro_part.graph.nodes() + s.later_micro_part.graph.nodes() + s.update_part.graph.nodes();
#else
  return 0;
#endif
}

}  // namespace retort::distill
