#pragma once
// One piece of stream work recorded once as a CUDA graph and replayed: the launches of many kernels become one
// launch, with no host work between them. Recording runs the code that enqueues the work (nothing executes), so
// that code must only enqueue: no host read of device memory, no wait, no copy from pageable host memory. A
// recording that fails leaves no trace (the stream leaves capture mode, the error is cleared) and says why, so the
// caller can go on enqueueing the work directly. Only for code built with CUDA.
#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace retort::cuda {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what `enqueue` puts on `stream` (the current device's compute stream) into an instantiated graph.
  // On failure (an exception from `enqueue` or a refusal of the driver) the result is empty and `failure` says why.
  static CudaGraph record(cudaStream_t stream, const std::function<void()>& enqueue, std::string* failure);

  bool ready() const { return exec_ != nullptr; }
  void launch(cudaStream_t stream) const;
  int64_t nodes() const { return nodes_; }
  // What the graph is made of, for logs: "kernel 120, memcpy 2, ...".
  const std::string& node_kinds() const { return kinds_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  int64_t nodes_ = 0;
  std::string kinds_;
};

}  // namespace retort::cuda
#endif
