// ops::FoldedNormCache: a fold is made once and kept while its tensors stay as they are, and made again as soon as
// one of them is replaced or written (a new place, or the storage's new stamp). Its values are
// kernels::fold_norm_into_linear's (checked against float64 in tests/core/kernels/test_gpt_decode_layers.cpp).
#include <gtest/gtest.h>

#include <string>

#include "core/ops/decode_ops.h"
#include "tests/core/ops/decoder_ops_test_support.h"
#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_graph.h"
#endif

namespace retort {
namespace {

using decoder_ops_testing::normal_values;
using decoder_ops_testing::stored;

TEST(FoldedNormCache, KeepsAFoldUntilATensorChanges) {
  const int64_t N = 6, K = 8;
  const Tensor gamma = stored(normal_values(K, 1, 1.0), {K}, DType::F32);
  const Tensor beta = stored(normal_values(K, 2, 1.0), {K}, DType::F32);
  Tensor w = stored(normal_values(N * K, 3, 1.0), {N, K}, DType::F32);
  const Tensor b = stored(normal_values(N, 4, 1.0), {N}, DType::F32);
  ops::FoldedNormCache cache;
  const kernels::NormedLinear first = cache.get(gamma, beta, w, b);
  // Unchanged tensors: the same fold, not a new one.
  EXPECT_EQ(cache.get(gamma, beta, w, b).weight.raw_data(), first.weight.raw_data());
  const std::vector<double> before = first.shift.to_doubles();

  // The weight written in place (as an optimizer step writes it): folded again, with the new values.
  w.copy_(stored(normal_values(N * K, 5, 1.0), {N, K}, DType::F32));
  const kernels::NormedLinear rewritten = cache.get(gamma, beta, w, b);
  EXPECT_NE(rewritten.weight.raw_data(), first.weight.raw_data());
  EXPECT_EQ(rewritten.shift.to_doubles(), kernels::fold_norm_into_linear(gamma, beta, w, b).shift.to_doubles());
  EXPECT_NE(rewritten.shift.to_doubles(), before);

  // Another norm bias (a different tensor): folded again; dropping it too.
  const Tensor other_beta = stored(normal_values(K, 6, 1.0), {K}, DType::F32);
  EXPECT_NE(cache.get(gamma, other_beta, w, b).weight.raw_data(), rewritten.weight.raw_data());
  const kernels::NormedLinear without = cache.get(gamma, Tensor(), w, b);
  EXPECT_EQ(without.shift.to_doubles(), b.to_doubles());  // no beta: the shift is the bias
}

// A fold of changed tensors met while a CUDA graph is being captured (weights cast inside the graph) is part of the
// graph, not kept: the cache still holds the eager fold afterwards, and each replay computes the new one.
TEST(FoldedNormCache, AFoldDuringACaptureIsNotKept) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
#ifdef RETORT_WITH_CUDA
  const Device gpu = Device::cuda(0);
  const int64_t N = 16, K = 64;
  const Tensor gamma = stored(normal_values(K, 11, 1.0), {K}, DType::F32, gpu);
  const Tensor beta = stored(normal_values(K, 12, 1.0), {K}, DType::F32, gpu);
  const Tensor b = stored(normal_values(N, 13, 1.0), {N}, DType::BF16, gpu);
  const Tensor w1 = stored(normal_values(N * K, 14, 1.0), {N, K}, DType::BF16, gpu);
  const Tensor w2 = stored(normal_values(N * K, 15, 1.0), {N, K}, DType::BF16, gpu);
  ops::FoldedNormCache cache;
  const kernels::NormedLinear eager = cache.get(gamma, beta, w1, b);
  Tensor shift = Tensor::zeros({N}, DType::F32, gpu);
  namespace rc = ::retort::cuda;
  rc::DeviceGuard guard(0);
  std::string failure;
  const rc::CudaGraph graph = rc::CudaGraph::record(
      rc::current_stream(), [&] { shift.copy_(cache.get(gamma, beta, w2, b).shift); }, &failure);
  ASSERT_TRUE(graph.ready()) << failure;
  EXPECT_EQ(cache.get(gamma, beta, w1, b).weight.raw_data(), eager.weight.raw_data());
  graph.launch(rc::current_stream());
  EXPECT_EQ(shift.to_doubles(), kernels::fold_norm_into_linear(gamma, beta, w2, b).shift.to_doubles());
#endif
}

}  // namespace
}  // namespace retort
