// eigh and REKLS on the GPU (cuSOLVER syevd / syevjBatched, cuBLAS in full float32): eigh against the CPU result
// and float64 checks, REKLS against the float64 reference and the CPU optimizer over 5 steps, and TP-REKLS on two
// GPUs over NCCL against single-GPU REKLS. Skipped without a GPU (or, for the last, without two).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/tensor/device.h"
#include "optim/rekls/eigh.h"
#include "optim/rekls/rekls.h"
#include "optim/rekls/tp_rekls.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/tp/sharding.h"
#include "tests/optim/rekls/rekls_test_support.h"

#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort::optim {
namespace {
using testing::MatrixD;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

std::vector<float> gram(int64_t k, int64_t cols, uint32_t seed) {
  const MatrixD b = testing::to_matrix(testing::normal_values(k * cols, seed), k, cols);
  const MatrixD a = b * b.transpose() / static_cast<double>(cols);
  std::vector<float> out(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k * k; ++i) out[static_cast<size_t>(i)] = static_cast<float>(a(i / k, i % k));
  return out;
}

// GPU decomposition of one matrix against the CPU one: same eigenvalues, valid reconstruction and
// orthonormality, and for well-separated eigenvalues the same eigenvectors up to sign.
void expect_gpu_matches_cpu(const std::vector<float>& a, int64_t k, const std::vector<float>& gpu_values,
                            const std::vector<float>& gpu_vectors) {
  EighResult cpu = eigh(Tensor::from_floats(a, {k, k}));
  const auto cpu_values = cpu.eigenvalues.to_doubles();
  const double scale = std::max(std::abs(cpu_values[0]), 1e-30);
  const MatrixD A = testing::to_matrix(a, k, k), Qg = testing::to_matrix(gpu_vectors, k, k);
  const MatrixD Qc = testing::to_matrix(cpu.eigenvectors);
  Eigen::VectorXd l(k);
  for (int64_t i = 0; i < k; ++i) {
    l(i) = gpu_values[static_cast<size_t>(i)];
    EXPECT_NEAR(l(i), cpu_values[static_cast<size_t>(i)], 3e-5 * scale * std::sqrt(double(k)))
        << "k " << k << " i " << i;
    if (i > 0) {
      EXPECT_GE(l(i - 1), l(i));
    }
  }
  EXPECT_LT((Qg * l.asDiagonal() * Qg.transpose() - A).cwiseAbs().maxCoeff() / scale, 3e-5 * std::sqrt(double(k)));
  EXPECT_LT((Qg.transpose() * Qg - MatrixD::Identity(k, k)).cwiseAbs().maxCoeff(), 3e-5 * std::sqrt(double(k)));
  const MatrixD overlap = Qc.transpose() * Qg;
  for (int64_t i = 0; i < k; ++i) {
    const bool separated = (i == 0 || l(i - 1) - l(i) > 1e-2 * scale) && (i == k - 1 || l(i) - l(i + 1) > 1e-2 * scale);
    if (separated) {
      EXPECT_NEAR(std::abs(overlap(i, i)), 1.0, 1e-3) << "eigenvector " << i << " of k " << k;
    }
  }
}

TEST(EighCuda, SyevdMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (auto [k, cols] : {std::pair<int64_t, int64_t>{8, 16}, {64, 20}, {300, 600}}) {
    const auto a = gram(k, cols, static_cast<uint32_t>(k + cols));
    EighResult r = eigh(Tensor::from_floats(a, {k, k}, DType::F32, kGpu));
    ASSERT_TRUE(r.eigenvalues.device().is_cuda());
    expect_gpu_matches_cpu(a, k, r.eigenvalues.to_floats(), r.eigenvectors.to_floats());
  }
}

TEST(EighCuda, BatchedJacobiAndLargeFallbackMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (auto [b, k] : {std::pair<int64_t, int64_t>{16, 24}, {3, 40}}) {
    std::vector<float> all;
    for (int64_t i = 0; i < b; ++i) {
      const auto a = gram(k, 2 * k, static_cast<uint32_t>(100 + i));
      all.insert(all.end(), a.begin(), a.end());
    }
    EighResult r = eigh_batched(Tensor::from_floats(all, {b, k, k}, DType::F32, kGpu));
    const auto values = r.eigenvalues.to_floats(), vectors = r.eigenvectors.to_floats();
    for (int64_t i = 0; i < b; ++i)
      expect_gpu_matches_cpu(std::vector<float>(all.begin() + i * k * k, all.begin() + (i + 1) * k * k), k,
                             std::vector<float>(values.begin() + i * k, values.begin() + (i + 1) * k),
                             std::vector<float>(vectors.begin() + i * k * k, vectors.begin() + (i + 1) * k * k));
  }
}

TEST(EighCuda, DeterministicBits) {
  SKIP_WITHOUT_GPU();
  const auto a = gram(128, 64, 5);
  Tensor x = Tensor::from_floats(a, {128, 128}, DType::F32, kGpu);
  EighResult first = eigh(x), second = eigh(x);
  EXPECT_EQ(first.eigenvalues.to_floats(), second.eigenvalues.to_floats());
  EXPECT_EQ(first.eigenvectors.to_floats(), second.eigenvectors.to_floats());
}

TEST(ReklsCuda, MatchesFloat64ReferenceAndCpuOverFiveSteps) {
  SKIP_WITHOUT_GPU();
  for (auto [m, n] : {std::pair<int64_t, int64_t>{16, 32}, {32, 16}, {96, 200}, {24, 40}}) {
    const auto w0 = testing::normal_values(m * n, 7, 0.5);
    Tensor wg = Tensor::from_floats(w0, {m, n}, DType::F32, kGpu).set_requires_grad(true);
    Tensor wc = Tensor::from_floats(w0, {m, n}).set_requires_grad(true);
    // eps at the gradient scale keeps float32 REKLS well conditioned (test_rekls_reference.cpp says why).
    ReklsOptions options;
    options.eps = 1e-3;
    testing::ReferenceOptions reference_options;
    reference_options.eps = 1e-3;
    Rekls gpu({{"w", {{"w", wg}}, 0.01}}, options);
    Rekls cpu({{"w", {{"w", wc}}, 0.01}}, options);
    testing::ReferenceRekls reference(m, n, reference_options);
    MatrixD wr = testing::to_matrix(w0, m, n);
    for (int t = 1; t <= 5; ++t) {
      const auto g = testing::normal_values(m * n, static_cast<uint32_t>(100 + t), 1e-3);
      wg.set_grad(Tensor::from_floats(g, {m, n}, DType::F32, kGpu));
      wc.set_grad(Tensor::from_floats(g, {m, n}));
      gpu.step(1e-2);
      cpu.step(1e-2);
      const MatrixD before = wr;
      reference.step(wr, testing::to_matrix(g, m, n), 1e-2);
      // The CPU test's tolerance: 2% of one step's largest update.
      const double step_size = (wr - before).cwiseAbs().maxCoeff();
      const MatrixD got = testing::to_matrix(wg);
      EXPECT_LT((got - wr).cwiseAbs().maxCoeff(), 2e-2 * step_size) << m << "x" << n << " step " << t;
      EXPECT_LT((got - testing::to_matrix(wc)).cwiseAbs().maxCoeff(), 2e-2 * step_size)
          << m << "x" << n << " step " << t;
    }
  }
}

TEST(TpReklsGpu, TwoGpusOverNcclMatchSingleGpuRekls) {
#ifndef RETORT_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda_device_count();
  struct Case {
    int64_t rows, cols;
    int partition_dim;
  };
  const std::vector<Case> cases = {{16, 32, 0}, {32, 16, 1}, {96, 200, 0}, {96, 200, 1}, {24, 40, -1}};
  ReklsOptions options;
  options.eps = 1e-3;
  auto initial = [&](size_t i) {
    return testing::normal_values(cases[i].rows * cases[i].cols, static_cast<uint32_t>(10 + i), 0.5);
  };
  auto gradient = [&](size_t i, int step) {
    return testing::normal_values(cases[i].rows * cases[i].cols, static_cast<uint32_t>(900 + 31 * i + step), 1e-3);
  };
  // Single-GPU REKLS on the full matrices: the weights after every step.
  nn::NamedTensors dense;
  for (size_t i = 0; i < cases.size(); ++i)
    dense.emplace_back(
        fmt::format("w{}", i),
        Tensor::from_floats(initial(i), {cases[i].rows, cases[i].cols}, DType::F32, kGpu).set_requires_grad(true));
  Rekls rekls({{"all", dense, 0.01}}, options);
  std::vector<std::vector<Tensor> > trajectory(cases.size());
  for (int step = 1; step <= 5; ++step) {
    for (size_t i = 0; i < cases.size(); ++i)
      dense[i].second.set_grad(
          Tensor::from_floats(gradient(i, step), {cases[i].rows, cases[i].cols}, DType::F32, kGpu));
    rekls.step(1e-2);
    for (size_t i = 0; i < cases.size(); ++i) trajectory[i].push_back(dense[i].second.to(Device::cpu()).clone());
  }
  run_ranks(2, [&](std::shared_ptr<Communicator> gloo) {
    const int rank = gloo->rank();
    const Device gpu = Device::cuda(rank);
    std::shared_ptr<Communicator> nccl =
        NcclCommunicator::create(std::dynamic_pointer_cast<GlooCommunicator>(gloo), rank);
    auto spec_of = [&](const Case& c) {
      ShardingSpec spec;
      spec.partition_dim = c.partition_dim;
      spec.group = nccl;
      return spec;
    };
    nn::NamedTensors params;
    for (size_t i = 0; i < cases.size(); ++i) {
      Tensor full = Tensor::from_floats(initial(i), {cases[i].rows, cases[i].cols});
      Tensor local = tp::shard_of(full, spec_of(cases[i]), rank, 2).to(gpu).clone().set_requires_grad(true);
      local.set_sharding(spec_of(cases[i]));
      params.emplace_back(fmt::format("w{}", i), local);
    }
    TpRekls opt({{"all", params, 0.01}}, options, nccl);
    for (int step = 1; step <= 5; ++step) {
      for (size_t i = 0; i < cases.size(); ++i) {
        Tensor full = Tensor::from_floats(gradient(i, step), {cases[i].rows, cases[i].cols});
        params[i].second.set_grad(tp::shard_of(full, spec_of(cases[i]), rank, 2).to(gpu).clone());
      }
      opt.step(1e-2);
      Tensor count = Tensor::full({1}, static_cast<double>(opt.eigh_calls_last_step()));
      gloo->all_reduce(count);
      EXPECT_EQ(count.item(), 2.0 * cases.size());
      for (size_t i = 0; i < cases.size(); ++i) {
        const auto want = tp::shard_of(trajectory[i][step - 1], spec_of(cases[i]), rank, 2).to_doubles();
        const auto start =
            tp::shard_of(Tensor::from_floats(initial(i), {cases[i].rows, cases[i].cols}), spec_of(cases[i]), rank, 2)
                .to_doubles();
        const auto got = params[i].second.to_doubles();
        double err = 0, move = 0;
        for (size_t j = 0; j < got.size(); ++j) {
          err = std::max(err, std::abs(got[j] - want[j]));
          move = std::max(move, std::abs(want[j] - start[j]));
        }
        // The CPU TP test's tolerance: 1% of the distance the weights have moved.
        EXPECT_LT(err, 1e-2 * move) << "case " << i << " rank " << rank << " step " << step;
      }
    }
  });
#endif
}

}  // namespace
}  // namespace retort::optim
