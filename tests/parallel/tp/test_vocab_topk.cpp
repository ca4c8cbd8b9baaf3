// The distributed top-k over vocab-sharded logits against the dense float64 reference (a stable sort of the
// full row and a float64 log-softmax) at tp 1, 2, 4 and 8 as Gloo thread ranks: every rank must return the
// dense top-k ids exactly, their full-vocabulary log-probabilities and the row lse. Covers ties across shard
// borders, -inf entries, k larger than a shard, bf16 logits, a temperature, the explicit-group override and
// bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/tp/sharding.h"
#include "parallel/tp/vocab_topk.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/tp/tp_test_support.h"
#include "tests/test_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::tp_testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Dense {
  std::vector<int32_t> indices;
  std::vector<double> logprobs, lse;
};

// Top-k of logits / temperature by a stable sort of the whole row, log-probabilities by a float64
// log-softmax.
Dense dense_topk(const Mat& logits, int k, double temperature) {
  Dense d;
  for (int64_t r = 0; r < logits.rows; ++r) {
    std::vector<double> row(static_cast<size_t>(logits.cols));
    for (int64_t j = 0; j < logits.cols; ++j) row[static_cast<size_t>(j)] = logits.at(r, j) / temperature;
    const double m = *std::max_element(row.begin(), row.end());
    double s = 0;
    for (double x : row) s += std::exp(x - m);
    const double lse = m + std::log(s);
    d.lse.push_back(lse);
    std::vector<int32_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int i = 0; i < k; ++i) {
      d.indices.push_back(order[static_cast<size_t>(i)]);
      d.logprobs.push_back(row[static_cast<size_t>(order[static_cast<size_t>(i)])] - lse);
    }
  }
  return d;
}

// Normal logits, or a few levels (ties everywhere, also across shard borders), a quarter of them -inf.
Mat make_logits(int64_t rows, int64_t cols, bool ties, DType dtype, uint32_t seed) {
  Mat m = random_mat(rows, cols, seed, 3.0);
  std::mt19937 gen(seed + 1);
  std::uniform_int_distribution<int> level(-3, 3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& x : m.v) {
    if (ties) x = level(gen);
    if (u(gen) < 0.25) x = -kInf;
  }
  m.v = Tensor::from_doubles(m.v, {rows, cols}, DType::F64).to(dtype).to_doubles();
  return m;
}

void expect_rank_matches(const tp::VocabTopK& got, const Dense& want, int k, const std::string& what) {
  const std::vector<int32_t> indices = got.indices.to_ints();
  const std::vector<double> logprobs = got.logprobs.to_doubles(), lse = got.lse.to_doubles();
  ASSERT_EQ(indices.size(), want.indices.size()) << what;
  ASSERT_EQ(got.indices.shape(), Shape({static_cast<int64_t>(want.lse.size()), k})) << what;
  for (size_t i = 0; i < indices.size(); ++i) {
    ASSERT_EQ(indices[i], want.indices[i]) << what << " entry " << i;
    if (want.logprobs[i] == -kInf) {
      ASSERT_EQ(logprobs[i], -kInf) << what << " entry " << i;
    } else {
      ASSERT_NEAR(logprobs[i], want.logprobs[i], 2e-5) << what << " entry " << i;
    }
  }
  for (size_t r = 0; r < lse.size(); ++r) EXPECT_NEAR(lse[r], want.lse[r], 2e-5) << what << " row " << r;
}

// One group of `tp` thread ranks runs every k in `ks` (each k on its own logits): connecting 8 thread ranks costs
// more than the top-k itself.
void check_case(int tp, DType dtype, bool ties, const std::vector<int>& ks, double temperature, bool explicit_group) {
  const int64_t rows = 10, vocab = 64;
  std::vector<Mat> logits;
  std::vector<Dense> want;
  std::vector<std::string> what;
  for (int k : ks) {
    logits.push_back(make_logits(rows, vocab, ties, dtype, 7 + static_cast<uint32_t>(k)));
    want.push_back(dense_topk(logits.back(), k, temperature));
    what.push_back("tp " + std::to_string(tp) + " " + std::string(dtype_name(dtype)) + (ties ? " ties" : "") + " k " +
                   std::to_string(k) + " T " + std::to_string(temperature) + (explicit_group ? " explicit group" : ""));
  }
  run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
    const ShardingSpec spec{1, 1, comm};
    for (size_t i = 0; i < ks.size(); ++i) {
      // Leading dims [2, 5] are flattened into the 10 rows.
      Tensor local = tp::shard_of(to_tensor(logits[i], DType::F64), spec, comm->rank(), tp)
                         .to(dtype)
                         .view({2, rows / 2, vocab / tp});
      tp::VocabTopKOptions options{ks[i], temperature, nullptr};
      if (explicit_group) {
        options.group = comm;  // the logits carry no sharding: the option says where the vocabulary is split
      } else {
        local.set_sharding({2, 1, comm});
      }
      expect_rank_matches(tp::vocab_topk(local, options), want[i], ks[i],
                          what[i] + " rank " + std::to_string(comm->rank()));
    }
  });
}

TEST(VocabTopK, EveryRankHoldsTheDenseTopK) {
  for (int tp : kTpSizes)
    for (DType dtype : {DType::F32, DType::BF16})
      for (bool ties : {false, true})
        // 20 > a shard's 16 columns at tp 4, 8 at tp 8; 64: the whole vocabulary
        check_case(tp, dtype, ties, {1, 5, 20, 64}, 1.0, false);
}

TEST(VocabTopK, TemperatureAndExplicitGroup) {
  for (int tp : kTpSizes) {
    check_case(tp, DType::F32, false, {8}, 2.0, false);
    check_case(tp, DType::F32, true, {8}, 1.0, true);
  }
}

// A vocabulary of 61 ids (divisible by none of 2, 3, 4) in shards of ceil(61 / tp) columns, the last one ending in
// padding of +1e4 that would win every row if it were read: every rank holds the dense top-k of the 61 real ids.
TEST(VocabTopK, APaddedLastShardIsNeverPicked) {
  const int64_t rows = 6, vocab = 61;
  for (int tp : {2, 3, 4}) {
    const Mat logits = make_logits(rows, vocab, false, DType::F32, 11);
    const int k = 20;
    const Dense want = dense_topk(logits, k, 1.0);
    const int64_t width = (vocab + tp - 1) / tp;
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      std::vector<double> shard;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = comm->rank() * width; j < (comm->rank() + 1) * width; ++j)
          shard.push_back(j < vocab ? logits.at(r, j) : 1e4);
      Tensor local = Tensor::from_doubles(shard, {rows, width}, DType::F32);
      local.set_sharding({1, 1, comm, vocab});
      expect_rank_matches(tp::vocab_topk(local, {k, 1.0, nullptr}), want, k,
                          "tp " + std::to_string(tp) + " rank " + std::to_string(comm->rank()));
    });
  }
}

TEST(VocabTopK, OnTheGpuWithoutCollectives) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 16, vocab = 32768;
  for (DType dtype : {DType::F32, DType::BF16})
    for (double temperature : {1.0, 2.0}) {
      const Mat logits = make_logits(rows, vocab, false, dtype, 3);
      const Dense want = dense_topk(logits, 64, temperature);
      const Tensor x = to_tensor(logits, DType::F64).to(dtype).to(Device::cuda(0));
      const tp::VocabTopK got = tp::vocab_topk(x, {64, temperature, nullptr});
      EXPECT_TRUE(got.indices.device().is_cuda() && got.logprobs.device().is_cuda());
      expect_rank_matches(got, want, 64,
                          "cuda " + std::string(dtype_name(dtype)) + " T " + std::to_string(temperature));
    }
}

// Two GPUs over NCCL (thread ranks, one GPU each): the candidates' all-gather and the statistics' all-reduces
// run on the device, ties across the shard border included. Skipped without two GPUs.
TEST(VocabTopK, TwoGpusOverNcclHoldTheDenseTopK) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  const int64_t rows = 32, vocab = 65536;
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool ties : {false, true}) {
      const Mat logits = make_logits(rows, vocab, ties, dtype, 11);
      const Dense want = dense_topk(logits, 64, 1.0);
      comm_testing::on_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
        const int rank = gloo->rank();
        auto nccl = NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
        Tensor local =
            tp::shard_of(to_tensor(logits, DType::F64), {1, 1, nccl}, rank, 2).to(dtype).to(Device::cuda(rank));
        local.set_sharding({1, 1, nccl});
        const tp::VocabTopK got = tp::vocab_topk(local, {64, 1.0, nullptr});
        EXPECT_TRUE(got.indices.device().is_cuda());
        expect_rank_matches(
            got, want, 64,
            "nccl " + std::string(dtype_name(dtype)) + (ties ? " ties" : "") + " rank " + std::to_string(rank));
      });
    }
#endif
}

TEST(VocabTopK, BadInputIsAnError) {
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    Tensor local = Tensor::zeros({3, 8});
    local.set_sharding({1, 1, comm});
    EXPECT_NE(testing::message_of([&] {
                tp::vocab_topk(local, {17, 1.0, nullptr});
              }).find("k = 17 must lie in [1, 16] (the vocabulary over 2 ranks of 8 columns)"),
              std::string::npos);
    EXPECT_NE(testing::message_of([&] {
                tp::vocab_topk(local, {4, 0.0, nullptr});
              }).find("temperature"),
              std::string::npos);
    Tensor rows_split = Tensor::zeros({3, 8});
    rows_split.set_sharding({0, 1, comm});
    EXPECT_NE(testing::message_of([&] {
                tp::vocab_topk(rows_split, {4, 1.0, nullptr});
              }).find("sharded on dim 0"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace retort::tp_testing
