// The CUDA top-k kernel against the CPU kernel (itself checked against a float64 sort in test_topk.cpp):
// identical ids and values on normal rows, heavy ties (bf16 levels, where the k-th value is shared by many
// entries), -inf entries and rows, odd widths and misaligned rows, k up to 256 and rows up to 131072 wide.
// Also prints the kernel's time at k = 64 for the widths distillation uses. Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/kernels/kernels.h"
#include "core/tensor/device.h"
#include "core/tensor/device_runtime.h"
#include "core/tensor/random.h"
#include "tests/core/kernels/topk_test_support.h"

namespace retort::topk_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

struct Result {
  Tensor values, indices, lse;
};

Result run_topk(const Tensor& x, int64_t k, int64_t index_base = 0, const Tensor& ids = Tensor()) {
  const int64_t rows = x.numel() / x.size(-1);
  const Device d = x.device();
  Result r{Tensor::empty({rows, k}, DType::F32, d), Tensor::empty({rows, k}, DType::I32, d),
           Tensor::empty({rows}, DType::F32, d)};
  kernels::topk(x, index_base, ids, r.values, r.indices, r.lse);
  return r;
}

void expect_same(const Tensor& x_cpu, int64_t k, const std::string& what, int64_t index_base = 0,
                 const Tensor& ids_cpu = Tensor()) {
  const Result want = run_topk(x_cpu, k, index_base, ids_cpu);
  const Result got = run_topk(x_cpu.to(kGpu), k, index_base, ids_cpu.defined() ? ids_cpu.to(kGpu) : Tensor());
  const std::vector<int32_t> gi = got.indices.to_ints(), wi = want.indices.to_ints();
  const std::vector<float> gv = got.values.to_floats(), wv = want.values.to_floats();
  ASSERT_EQ(gi.size(), wi.size()) << what;
  for (size_t i = 0; i < gi.size(); ++i) {
    ASSERT_EQ(gi[i], wi[i]) << what << " entry " << i << " (row " << i / k << ")";
    ASSERT_EQ(gv[i], wv[i]) << what << " entry " << i;
  }
  const std::vector<float> gl = got.lse.to_floats(), wl = want.lse.to_floats();
  for (size_t r = 0; r < gl.size(); ++r) {
    if (std::isinf(wl[r])) {
      EXPECT_EQ(gl[r], wl[r]) << what << " row " << r;
    } else {
      EXPECT_NEAR(gl[r], wl[r], 2e-5 * std::max(1.0f, std::abs(wl[r]))) << what << " row " << r;
    }
  }
}

TEST(TopKCuda, MatchesTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t rows, cols, k;
  };
  for (const Shape s : {Shape{5, 37, 37}, Shape{9, 1031, 64}, Shape{8, 32768, 64}, Shape{4, 50257, 256},
                        Shape{3, 131072, 64}, Shape{3, 131072, 1}})
    for (DType dtype : {DType::F32, DType::BF16})
      for (Values kind : {Values::Normal, Values::FewLevels, Values::WithNegInf}) {
        const std::string what = "[" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "] k " +
                                 std::to_string(s.k) + " " + std::string(dtype_name(dtype)) + " kind " +
                                 std::to_string(static_cast<int>(kind));
        const std::vector<double> x = make_rows(s.rows, s.cols, kind, dtype, 17);
        expect_same(Tensor::from_doubles(x, {s.rows, s.cols}, DType::F64).to(dtype), s.k, what);
      }
}

// Rows [1, rows + 1) of an odd-width tensor: the rows start off 16-byte boundaries.
TEST(TopKCuda, MisalignedRowsAndIdMaps) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 6, cols = 4099, k = 100;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const std::vector<double> x = make_rows(rows + 1, cols, Values::FewLevels, dtype, 23);
    const Tensor all = Tensor::from_doubles(x, {rows + 1, cols}, DType::F64).to(dtype);
    expect_same(all.rows(1, rows), k, "misaligned " + std::string(dtype_name(dtype)), 12345);
    std::vector<int32_t> ids(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 1000003);
    expect_same(all.rows(1, rows), k, "id map", 0, Tensor::from_ints(ids, {rows, cols}));
  }
}

// Not a pass/fail check: the time per call at the shapes of a teacher run, for docs/benchmarks.md.
TEST(TopKCuda, ReportsTheTimeAtK64) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 1024, k = 64;
  for (int64_t cols : {int64_t{32768}, int64_t{131072}})
    for (DType dtype : {DType::BF16, DType::F32}) {
      const Tensor input = randn({rows, cols}, 3.0, 29, 0, dtype).to(kGpu);
      Result r = run_topk(input, k);
      device_runtime::synchronize(kGpu);
      constexpr int kRepeats = 10;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kRepeats; ++i) kernels::topk(input, 0, Tensor(), r.values, r.indices, r.lse);
      device_runtime::synchronize(kGpu);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kRepeats;
      const double gbps = static_cast<double>(input.nbytes()) / (ms * 1e6);
      std::printf("topk cuda: [%lld, %lld] %s k=%lld: %.3f ms (%.0f GB/s of logits)\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), std::string(dtype_name(dtype)).c_str(), static_cast<long long>(k), ms,
                  gbps);
      EXPECT_GT(ms, 0.0);
    }
}

}  // namespace
}  // namespace retort::topk_testing
