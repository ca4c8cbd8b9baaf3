#include "core/cuda/cuda_graph.h"

#ifdef RETORT_WITH_CUDA
#include <map>
#include <utility>
#include <vector>

#include "core/cuda/cuda_context.h"

namespace retort::cuda {

namespace {

std::string describe_nodes(cudaGraph_t graph, size_t count) {
  std::vector<cudaGraphNode_t> all(count);
  if (count == 0 || cudaGraphGetNodes(graph, all.data(), &count) != cudaSuccess) return "";
  std::map<std::string, int> tally;
  for (cudaGraphNode_t node : all) {
    cudaGraphNodeType type{};
    cudaGraphNodeGetType(node, &type);
    switch (type) {
      case cudaGraphNodeTypeKernel:
        ++tally["kernel"];
        break;
      case cudaGraphNodeTypeMemcpy:
        ++tally["memcpy"];
        break;
      case cudaGraphNodeTypeMemset:
        ++tally["memset"];
        break;
      case cudaGraphNodeTypeMemAlloc:
        ++tally["alloc"];
        break;
      case cudaGraphNodeTypeMemFree:
        ++tally["free"];
        break;
      case cudaGraphNodeTypeEmpty:
        ++tally["empty"];
        break;
      default:
        ++tally["other"];
        break;
    }
  }
  std::string text;
  for (const auto& [kind, n] : tally) text += (text.empty() ? "" : ", ") + kind + " " + std::to_string(n);
  return text;
}

}  // namespace

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : exec_(std::exchange(other.exec_, nullptr)), nodes_(other.nodes_), kinds_(std::move(other.kinds_)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
    nodes_ = other.nodes_;
    kinds_ = std::move(other.kinds_);
  }
  return *this;
}

CudaGraph CudaGraph::record(cudaStream_t stream, const std::function<void()>& enqueue, std::string* failure) {
  CudaGraph out;
  std::string why;
  cudaGraph_t graph = nullptr;
  // Global mode: any call that would wait on the device while recording (from any thread) fails the capture
  // instead of silently reading a value that the replays would never refresh.
  RETORT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    enqueue();
  } catch (const std::exception& e) {
    why = e.what();
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (why.empty() && ended != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  if (why.empty()) {
    size_t count = 0;
    cudaGraphGetNodes(graph, nullptr, &count);
    out.kinds_ = describe_nodes(graph, count);
    const cudaError_t made = cudaGraphInstantiate(&out.exec_, graph, 0);
    if (made != cudaSuccess) {
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
      out.exec_ = nullptr;
    } else {
      out.nodes_ = static_cast<int64_t>(count);
      // Moves the one-time setup of the graph (its memory, its launch state) out of the first replay.
      cudaGraphUpload(out.exec_, stream);
    }
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty()) {
    cudaGetLastError();  // a failed capture leaves a (non-sticky) error behind
    if (failure) *failure = why;
    return CudaGraph();
  }
  return out;
}

void CudaGraph::launch(cudaStream_t stream) const {
  RETORT_CHECK(exec_ != nullptr, "CudaGraph::launch: the graph was not recorded");
  RETORT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace retort::cuda
#endif
