// ops::FoldedNormCache: a fold is made once and kept while its tensors stay as they are, and made again as soon as
// one of them is replaced or written (a new place, or the storage's new stamp). Its values are
// kernels::fold_norm_into_linear's (checked against float64 in tests/core/kernels/test_gpt_decode_layers.cpp).
#include <gtest/gtest.h>

#include "core/ops/decode_ops.h"
#include "tests/core/ops/decoder_ops_test_support.h"

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

}  // namespace
}  // namespace retort
