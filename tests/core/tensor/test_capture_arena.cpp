// The capture arena (core/tensor/capture_arena.h) on the GPU: tensors made while a stream is captured come from
// the arena, so the graph holds kernel nodes only and replays compute what an eager run computes; the tally of an
// eager run is what the same work carves; frees of arena memory are skipped and the arena's own block goes back; a
// full arena names the sizes. Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "core/tensor/capture_arena.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/cuda_context.h"
#endif

namespace retort {
namespace {

#ifdef RETORT_WITH_CUDA

// y = gelu(a * b + a) on fresh tensors: three ops, each allocating its output.
Tensor some_work(const Tensor& a, const Tensor& b) {
  return ops::gelu(ops::add(ops::mul(a, b), a));
}

std::vector<float> values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int64_t>(i % 17) - 8);
  return v;
}

TEST(CaptureArenaCuda, CapturedWorkHasNoMemoryNodesAndReplaysTheEagerResult) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const int64_t n = 3000;
  const Tensor a = Tensor::from_floats(values(n, 0.1f), {n}, DType::F32, gpu);
  const Tensor b = Tensor::from_floats(values(n, -0.05f), {n}, DType::F32, gpu);
  size_t eager_bytes = 0;
  std::vector<float> eager;
  {
    const AllocationTally tally;
    eager = some_work(a, b).to_floats();
    eager_bytes = tally.bytes();
  }
  EXPECT_GE(eager_bytes, 3 * n * sizeof(float)) << "three outputs of n floats each";

  CaptureArena arena(gpu, eager_bytes);
  Tensor out = Tensor::empty({n}, DType::F32, gpu);
  cudaStream_t stream = cuda::compute_stream(0);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  {
    const CaptureArena::Scope scope(arena);
    const Tensor y = some_work(a, b);
    ASSERT_EQ(cudaMemcpyAsync(out.raw_data(), y.raw_data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
              cudaSuccess);
    EXPECT_TRUE(CaptureArena::owns(y.raw_data()));
  }  // y is freed here: a skipped free, not a free node
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(arena.used(), eager_bytes) << "the capture carves what the eager run allocated";
  EXPECT_FALSE(CaptureArena::owns(out.raw_data()));

  size_t count = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  ASSERT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    EXPECT_NE(type, cudaGraphNodeTypeMemAlloc);
    EXPECT_NE(type, cudaGraphNodeTypeMemFree);
  }
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(out.raw_data(), 0xff, n * sizeof(float), stream), cudaSuccess);  // NaN
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(out.to_floats(), eager) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The same three ops with a * b freed as soon as the sum is made.
Tensor staged_work(const Tensor& a, const Tensor& b) {
  Tensor sum;
  {
    const Tensor product = ops::mul(a, b);
    sum = ops::add(product, a);
  }
  return ops::gelu(sum);
}

// A reusing arena: the intermediate a * b is freed before gelu's output is made, so the capture takes the eager
// peak (two live tensors at most) instead of all three outputs, and replays still give the eager result.
TEST(CaptureArenaCuda, AReusingArenaTakesThePeakAndReplaysTheEagerResult) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const int64_t n = 4096;
  const Tensor a = Tensor::from_floats(values(n, 0.1f), {n}, DType::F32, gpu);
  const Tensor b = Tensor::from_floats(values(n, -0.05f), {n}, DType::F32, gpu);
  size_t total = 0, peak = 0;
  std::vector<float> eager;
  {
    const AllocationTally tally;
    eager = staged_work(a, b).to_floats();
    total = tally.bytes();
    peak = tally.peak_bytes();
  }
  EXPECT_LT(peak, total) << "a * b is freed before the last output is made";
  CaptureArena arena(gpu, peak, CaptureArena::Reuse::kAfterFree);
  Tensor out = Tensor::empty({n}, DType::F32, gpu);
  cudaStream_t stream = cuda::compute_stream(0);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  {
    const CaptureArena::Scope scope(arena);
    const Tensor y = staged_work(a, b);
    ASSERT_EQ(cudaMemcpyAsync(out.raw_data(), y.raw_data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_LE(arena.used(), peak);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(out.raw_data(), 0xff, n * sizeof(float), stream), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(out.to_floats(), eager) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CaptureArenaCuda, AFullArenaNamesItsSizes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  CaptureArena arena(gpu, 1024);
  const CaptureArena::Scope scope(arena);
  const Tensor fits = Tensor::empty({256}, DType::F32, gpu);  // 1024 bytes
  EXPECT_TRUE(CaptureArena::owns(fits.raw_data()));
  try {
    const Tensor more = Tensor::empty({1}, DType::F32, gpu);
    FAIL() << "a full arena must refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1024 in use"), std::string::npos) << e.what();
  }
}

TEST(CaptureArenaCuda, OtherDevicesAndClosedScopesUseTheAllocator) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  CaptureArena arena(gpu, 1 << 16);
  Tensor outside = Tensor::empty({16}, DType::F32, gpu);
  EXPECT_FALSE(CaptureArena::owns(outside.raw_data()));
  {
    const CaptureArena::Scope scope(arena);
    const Tensor host = Tensor::empty({16}, DType::F32, Device::cpu());
    EXPECT_FALSE(CaptureArena::owns(host.raw_data()));
    EXPECT_EQ(arena.used(), 0u);
  }
}

#else

TEST(CaptureArenaCuda, CapturedWorkHasNoMemoryNodesAndReplaysTheEagerResult) {
  GTEST_SKIP() << "a build without CUDA";
}

#endif

}  // namespace
}  // namespace retort
