// ops::PaddedRowsCache: a weight's rows padded with zeros to a multiple of 8, made once and kept while the weight
// stays as it is, made again as soon as it is replaced or written; a weight that needs no padding is returned as is.
#include <gtest/gtest.h>

#include "core/ops/decode_ops.h"
#include "tests/core/ops/decoder_ops_test_support.h"

namespace retort {
namespace {

using decoder_ops_testing::normal_values;
using decoder_ops_testing::stored;

// The padded copy's values: the weight's rows, then zero rows up to the next multiple of 8.
void expect_padded(const Tensor& padded, const Tensor& weight) {
  const int64_t N = weight.size(0), K = weight.size(1);
  ASSERT_EQ(padded.shape(), (Shape{(N + 7) / 8 * 8, K}));
  const std::vector<double> got = padded.to_doubles(), want = weight.to_doubles();
  for (int64_t i = 0; i < padded.size(0) * K; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)], i < N * K ? want[static_cast<size_t>(i)] : 0.0) << "element " << i;
}

TEST(PaddedRowsCache, PadsOnceAndAgainWhenTheWeightChanges) {
  const int64_t N = 13, K = 6;
  Tensor w = stored(normal_values(N * K, 1, 1.0), {N, K}, DType::BF16);
  ops::PaddedRowsCache cache;
  const Tensor first = cache.get(w);
  expect_padded(first, w);
  EXPECT_EQ(cache.get(w).raw_data(), first.raw_data()) << "an unchanged weight was padded again";

  // Written in place (as an optimizer step or a checkpoint load writes it): padded again, with the new values.
  w.copy_(stored(normal_values(N * K, 2, 1.0), {N, K}, DType::BF16));
  const Tensor rewritten = cache.get(w);
  EXPECT_NE(rewritten.raw_data(), first.raw_data());
  expect_padded(rewritten, w);

  // Another tensor: padded again.
  const Tensor other = stored(normal_values(N * K, 3, 1.0), {N, K}, DType::BF16);
  expect_padded(cache.get(other), other);
}

TEST(PaddedRowsCache, AWeightOfWholeGroupsOfEightIsReturnedAsIs) {
  const Tensor w = stored(normal_values(16 * 4, 4, 1.0), {16, 4}, DType::BF16);
  ops::PaddedRowsCache cache;
  EXPECT_EQ(cache.get(w).raw_data(), w.raw_data());
}

TEST(PaddedRowsCache, RejectsAnythingButAMatrix) {
  ops::PaddedRowsCache cache;
  const Tensor v = stored(normal_values(5, 5, 1.0), {5}, DType::BF16);
  EXPECT_THROW(cache.get(v), std::exception);
}

}  // namespace
}  // namespace retort
