// The CPU top-k kernel against a float64 stable sort written in the test: ties, -inf entries and rows, k up to
// the row width, bf16 and f64 input, global ids through index_base and through an id map, and the row
// log-sum-exp; bad arguments are errors.
#include <gtest/gtest.h>

#include <string>

#include "core/kernels/kernels.h"
#include "tests/core/kernels/topk_test_support.h"
#include "tests/test_support.h"

namespace retort::topk_testing {
namespace {

struct Result {
  Tensor values, indices, lse;
};

Result run_topk(const Tensor& x, int64_t k, int64_t index_base = 0, const Tensor& ids = Tensor()) {
  const int64_t rows = x.numel() / x.size(-1);
  Result r{Tensor::empty({rows, k}, DType::F32), Tensor::empty({rows, k}, DType::I32), Tensor::empty({rows})};
  kernels::topk(x, index_base, ids, r.values, r.indices, r.lse);
  return r;
}

void expect_matches(const Result& got, const Reference& want, const std::string& what) {
  const std::vector<double> values = got.values.to_doubles();
  const std::vector<int32_t> indices = got.indices.to_ints();
  ASSERT_EQ(values.size(), want.values.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(indices[i], want.indices[i]) << what << " entry " << i;
    // values are f32: f64 input is rounded on the way out
    ASSERT_EQ(values[i], static_cast<double>(static_cast<float>(want.values[i]))) << what << " entry " << i;
  }
  const std::vector<double> lse = got.lse.to_doubles();
  for (size_t r = 0; r < lse.size(); ++r) {
    if (want.lse[r] == -kInf) {
      EXPECT_EQ(lse[r], -kInf) << what << " row " << r;
    } else {
      EXPECT_NEAR(lse[r], want.lse[r], 1e-6 * std::max(1.0, std::abs(want.lse[r]))) << what << " row " << r;
    }
  }
}

TEST(TopKCpu, MatchesAStableSortOnEveryKindOfRow) {
  const int64_t rows = 6, cols = 301;
  for (DType dtype : {DType::F32, DType::BF16, DType::F64})
    for (Values kind : {Values::Normal, Values::FewLevels, Values::WithNegInf})
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{64}, cols}) {
        const std::string what = std::string(dtype_name(dtype)) + " kind " + std::to_string(static_cast<int>(kind)) +
                                 " k " + std::to_string(k);
        const std::vector<double> x = make_rows(rows, cols, kind, dtype, 11 + static_cast<uint32_t>(k));
        const Tensor input = Tensor::from_doubles(x, {rows, cols}, DType::F64).to(dtype);
        expect_matches(run_topk(input, k), reference_topk(x, rows, cols, k), what);
      }
}

TEST(TopKCpu, LeadingDimsAreRows) {
  const std::vector<double> x = make_rows(6, 40, Values::Normal, DType::F32, 3);
  const Tensor input = Tensor::from_doubles(x, {2, 3, 40}, DType::F32);
  expect_matches(run_topk(input, 5), reference_topk(x, 6, 40, 5), "[2, 3, 40]");
}

TEST(TopKCpu, NegativeZeroTiesWithPositiveZero) {
  const Tensor x = Tensor::from_floats({0.0f, -0.0f, -1.0f, 0.0f}, {1, 4});
  const Result r = run_topk(x, 3);
  EXPECT_EQ(r.indices.to_ints(), (std::vector<int32_t>{0, 1, 3}));
}

TEST(TopKCpu, IdsComeFromTheBaseOrTheIdMap) {
  const int64_t rows = 3, cols = 50, k = 9;
  const std::vector<double> x = make_rows(rows, cols, Values::FewLevels, DType::F32, 5);
  const Tensor input = Tensor::from_doubles(x, {rows, cols}, DType::F32);
  const Reference want = reference_topk(x, rows, cols, k);
  const Result based = run_topk(input, k, 1000);
  std::vector<int32_t> id_map(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < id_map.size(); ++i) id_map[i] = static_cast<int32_t>(7 * i + 3);
  const Result mapped = run_topk(input, k, 0, Tensor::from_ints(id_map, {rows, cols}));
  const std::vector<int32_t> got_based = based.indices.to_ints(), got_mapped = mapped.indices.to_ints();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(r * k + i);
      EXPECT_EQ(got_based[at], 1000 + want.indices[at]);
      EXPECT_EQ(got_mapped[at], id_map[static_cast<size_t>(r * cols + want.indices[at])]);
    }
}

TEST(TopKCpu, BadArgumentsAreErrors) {
  const Tensor x = Tensor::zeros({2, 8});
  EXPECT_NE(testing::message_of([&] { run_topk(x, 9); }).find("k = 9 must lie in [1, 8]"), std::string::npos);
  EXPECT_NE(testing::message_of<Error>([&] {
              Tensor values = Tensor::empty({2, 3}, DType::F32), indices = Tensor::empty({2, 3}, DType::F32), lse;
              kernels::topk(x, 0, Tensor(), values, indices, lse);
            }).find("indices"),
            std::string::npos);
}

}  // namespace
}  // namespace retort::topk_testing
