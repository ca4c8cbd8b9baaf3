// The vocab-parallel sampler on the GPU. The noise, the fixed-point nucleus masses and the packing are the same
// integers and doubles on both backends (parallel/generate/sampling_math.h), and the GPU top-k kernel equals the
// CPU's, so the GPU must return the CPU's tokens EXACTLY for the same logits, options, seed and keys: greedy, top-k,
// top-p (the same allowed sets) and the draws themselves, up to vocabularies of 262144 and batches of 64 rows (rows of
// 50257 columns are read a column at a time, rows of 4096 and 262144 in 16-byte packs).
// It also draws many samples on the GPU and checks their support and frequencies against the float64 reference,
// and runs tp 2 (Gloo thread ranks, each with its shard on the GPU). Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/tensor/device.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/generate/vocab_sampler.h"
#include "parallel/tp/sharding.h"
#include "tests/parallel/generate/vocab_sampler_test_support.h"

namespace retort::sampler_testing {
namespace {

using generate::sample_next_tokens;
using generate::SamplingOptions;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

// Normal logits of scale `scale` (a sharp or a flat distribution), ties on bf16 levels, a tenth at -inf.
Tensor random_logits(int64_t rows, int64_t vocab, double scale, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(rows * vocab));
  for (auto& x : v) x = u(gen) < 0.1 ? -kInf : normal(gen);
  return Tensor::from_doubles(v, {rows, vocab}, DType::F64).to(dtype);
}

std::vector<uint64_t> random_keys(int64_t rows, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint64_t> keys(static_cast<size_t>(rows));
  for (auto& k : keys) k = gen();
  return keys;
}

std::vector<SamplingOptions> option_grid(uint64_t seed) {
  std::vector<SamplingOptions> grid;
  for (double temperature : {0.0, 0.7, 1.0, 1.8})
    for (int top_k : {0, 1, 50, 256})
      for (double top_p : {1.0, 0.95, 0.5}) grid.push_back({temperature, top_k, top_p, seed});
  return grid;
}

std::string describe(const SamplingOptions& o) {
  return "T " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
         std::to_string(o.top_p);
}

// The single passes a graphed decode step runs on the device (enqueue_argmax, enqueue_best_gumbel: per-row
// parameters and results in device memory) give, through tokens_from_winners, exactly the CPU sampler's tokens;
// the argmax also equals a float64 argmax written here (ties to the smaller id; -0 and +0 tie). Rows with tied
// maxima and a row whose maximum is a signed zero are included.
TEST(VocabSamplerCuda, TheDevicePassesOfAGraphedStepGiveTheSamplersTokens) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t vocab : {50304, 262144}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " vocab " + std::to_string(vocab));
      const int64_t rows = 7;
      std::vector<double> v = random_logits(rows, vocab, 3.0, DType::F64, 11).to_doubles();
      // Row 1: the maximum held by three ids; row 2: every logit <= 0, the maximum a -0 at 9 and a +0 at 4000.
      for (int64_t j : {17, 30000, 40001}) v[static_cast<size_t>(vocab + j)] = 50.0;
      for (int64_t j = 0; j < vocab; ++j) v[static_cast<size_t>(2 * vocab + j)] = -1.0 - (j % 5);
      v[static_cast<size_t>(2 * vocab + 9)] = -0.0;
      v[static_cast<size_t>(2 * vocab + 4000)] = 0.0;
      const Tensor cpu = Tensor::from_doubles(v, {rows, vocab}, DType::F64).to(dtype);
      const Tensor gpu = cpu.to(kGpu);
      const std::vector<uint64_t> keys = random_keys(rows, 5);

      Tensor best = Tensor::zeros({2 * rows}, DType::I32, kGpu);
      auto winners = [&] {
        const std::vector<int32_t> words = best.to_ints();
        std::vector<uint64_t> out(static_cast<size_t>(rows));
        std::memcpy(out.data(), words.data(), out.size() * sizeof(uint64_t));
        return out;
      };
      generate::kernels::cuda::enqueue_argmax(gpu, 0, best.data<uint64_t>());
      const std::vector<int32_t> greedy =
          generate::tokens_from_winners(winners(), generate::SinglePassSampling::Argmax);
      SamplingOptions greedy_options{0.0, 0, 1.0, 3};
      EXPECT_EQ(greedy, sample_next_tokens(cpu, greedy_options, keys));
      const std::vector<double> rounded = cpu.to_doubles();
      for (int64_t r = 0; r < rows; ++r) {
        int64_t want = 0;
        for (int64_t j = 1; j < vocab; ++j)
          if (rounded[static_cast<size_t>(r * vocab + j)] > rounded[static_cast<size_t>(r * vocab + want)]) want = j;
        EXPECT_EQ(greedy[static_cast<size_t>(r)], want) << "row " << r;
      }
      EXPECT_EQ(greedy[1], 17);
      EXPECT_EQ(greedy[2], 9);

      for (double temperature : {0.7, 1.0}) {
        std::vector<generate::kernels::SamplerRowParams> params;
        for (uint64_t key : keys) params.push_back({key, 0u, 0.f});
        Tensor device_params = Tensor::zeros({4 * rows}, DType::I32, kGpu);
        std::vector<int32_t> words(static_cast<size_t>(4 * rows));
        std::memcpy(words.data(), params.data(), params.size() * sizeof(params[0]));
        device_params.copy_(Tensor::from_ints(words, {4 * rows}));
        generate::kernels::cuda::enqueue_best_gumbel(
            gpu, 0, temperature, 3, static_cast<const generate::kernels::SamplerRowParams*>(device_params.raw_data()),
            best.data<uint64_t>());
        SamplingOptions sampled{temperature, 0, 1.0, 3};
        EXPECT_EQ(generate::tokens_from_winners(winners(), generate::SinglePassSampling::Gumbel),
                  sample_next_tokens(cpu, sampled, keys))
            << "T " << temperature;
      }
    }
  }
#endif
}

TEST(VocabSamplerCuda, SameTokensAsTheCpuForEveryOption) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t rows, vocab;
  };
  for (const Shape shape : {Shape{64, 50257}, Shape{64, 4096}, Shape{8, 262144}})
    for (DType dtype : {DType::F32, DType::BF16})
      for (double scale : {1.0, 4.0}) {
        const Tensor cpu = random_logits(shape.rows, shape.vocab, scale, dtype, 17);
        const Tensor gpu = cpu.to(kGpu);
        const std::vector<uint64_t> keys = random_keys(shape.rows, 3);
        for (const SamplingOptions& options : option_grid(2024)) {
          const std::vector<int32_t> want = sample_next_tokens(cpu, options, keys);
          EXPECT_EQ(sample_next_tokens(gpu, options, keys), want)
              << shape.rows << " x " << shape.vocab << " " << dtype_name(dtype) << " scale " << scale << " "
              << describe(options);
        }
      }
}

TEST(VocabSamplerCuda, GreedyIsTheCpuArgmaxWithTiesToTheSmallerId) {
  SKIP_WITHOUT_GPU();
  // bf16 levels: many ties at the maximum, also far apart in the row.
  const int64_t rows = 64, vocab = 131072;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> level(-40, 3);
  std::vector<double> v(static_cast<size_t>(rows * vocab));
  for (auto& x : v) x = level(gen) * 0.25;
  const Tensor cpu = Tensor::from_doubles(v, {rows, vocab}, DType::F64).to(DType::BF16);
  std::vector<int32_t> want;
  for (int64_t r = 0; r < rows; ++r)
    want.push_back(static_cast<int32_t>(std::max_element(v.begin() + r * vocab, v.begin() + (r + 1) * vocab) -
                                        (v.begin() + r * vocab)));
  EXPECT_EQ(sample_next_tokens(cpu.to(kGpu), {0.0, 0, 1.0, 0}, random_keys(rows, 1)), want);
  EXPECT_EQ(sample_next_tokens(cpu, {0.0, 0, 1.0, 0}, random_keys(rows, 1)), want);
}

TEST(VocabSamplerCuda, FrequenciesAndSupportMatchTheFloat64Reference) {
  SKIP_WITHOUT_GPU();
  const std::vector<double> row = structured_row(40, 11);
  for (const DistributionCase& c :
       {DistributionCase{1.0, 0, 1.0}, DistributionCase{0.7, 0, 1.0}, DistributionCase{1.0, 5, 1.0},
        DistributionCase{1.3, 0, 0.5}, DistributionCase{0.6, 0, 0.9}, DistributionCase{1.0, 10, 0.7}})
    for (DType dtype : {DType::F32, DType::BF16}) expect_distribution(row, dtype, kGpu, c, 40000, 1234);
}

TEST(VocabSamplerCuda, TpTwoWithShardsOnTheGpuGivesTheDenseTokens) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 16, vocab = 8192;
  const Tensor dense = random_logits(rows, vocab, 3.0, DType::F32, 9);
  const std::vector<uint64_t> keys = random_keys(rows, 4);
  const std::vector<SamplingOptions> grid = option_grid(7);
  std::vector<std::vector<int32_t>> want;
  for (const SamplingOptions& options : grid) want.push_back(sample_next_tokens(dense, options, keys));
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    Tensor local = tp::shard_of(dense, {1, 1, comm}, comm->rank(), 2).to(kGpu);
    local.set_sharding({1, 1, comm});
    for (size_t i = 0; i < grid.size(); ++i)
      EXPECT_EQ(sample_next_tokens(local, grid[i], keys), want[i])
          << "rank " << comm->rank() << " " << describe(grid[i]);
  });
}

TEST(VocabSamplerCuda, PrintsTheTimeOfOneStep) {
  SKIP_WITHOUT_GPU();
  // Not a benchmark with a peer, a sanity figure for the generation loop: 64 rows of a 131072-token shard.
  const Tensor x = random_logits(64, 131072, 2.0, DType::BF16, 1).to(kGpu);
  const std::vector<uint64_t> keys = random_keys(64, 2);
  for (const SamplingOptions& options : {SamplingOptions{0.0, 0, 1.0, 1}, SamplingOptions{1.0, 0, 1.0, 1},
                                         SamplingOptions{1.0, 50, 0.9, 1}, SamplingOptions{1.0, 0, 0.9, 1}}) {
    sample_next_tokens(x, options, keys);  // warm-up
    const auto start = std::chrono::steady_clock::now();
    const int reps = 20;
    for (int i = 0; i < reps; ++i) sample_next_tokens(x, options, keys);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ sampler ] 64 x 131072 bf16, %s: %.3f ms per call\n", describe(options).c_str(), ms / reps);
  }
}

}  // namespace
}  // namespace retort::sampler_testing
