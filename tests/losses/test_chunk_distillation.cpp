// The cross-tokenizer losses (losses/chunk_distillation.h) against the dense float64 reference of
// chunk_reference.h on a hand-made alignment with every chunk shape: the loss on every rank and each rank's LOCAL
// gradient slice at tp 1, 2 and 4 (Gloo thread ranks; padded last student shards), the collectives they run, finite
// differences of the float64 path, CE mixing (fixed ratio and dynamic scaling), temperature, a normalizer, f32 and
// bf16 logits, and the errors of bad input. Both kinds: the chunk-averaged KL and the gold loss.
#include <gtest/gtest.h>

#include "chunk_reference.h"
#include "core/tensor/device.h"
#include "core/util/error.h"
#include "loss_test_support.h"

namespace retort::chunk_testing {
namespace {

using loss_testing::grad_error;
using loss_testing::loss_error;
using loss_testing::on_ranks;
using loss_testing::RankResult;
using loss_testing::run_rank;
using losses::ChunkDistillationOptions;
using losses::ChunkLossKind;

ReferenceOptions reference_options(const ChunkDistillationOptions& o) {
  ReferenceOptions r;
  r.temperature = o.temperature;
  r.t_squared = o.scale_by_t_squared;
  r.kd_ratio = o.kd_ratio;
  r.dynamic = o.dynamic_ce_scaling;
  r.normalizer = o.normalizer.value_or(0.0);
  r.gold = o.kind == ChunkLossKind::kGold;
  r.gold_top = o.gold_uncommon_top;
  return r;
}

// Every rank's loss and local gradient at `tp`, on `device`, the logits stored as `dtype`.
std::vector<RankResult> run_at(ChunkProblem p, int tp, const ChunkDistillationOptions& options, DType dtype,
                               Device device = Device::cpu(), bool three_d = false) {
  p.vocab_local = (p.vocab + tp - 1) / tp;
  std::vector<RankResult> results(static_cast<size_t>(tp));
  on_ranks(tp, device, false, [&](int rank, Device dev, std::shared_ptr<Communicator> transport) {
    results[static_cast<size_t>(rank)] = run_rank(
        p, p.logits, three_d, rank, dtype, dev, transport, false, options,
        [&](const Tensor& logits, const ChunkDistillationOptions& o) {
          const Tensor labels = Tensor::from_ints(p.labels, {p.rows});
          return losses::chunk_distillation_loss(logits, labels, p.teacher(), p.chunks(), p.projection(), o, p.common())
              .loss;
        });
  });
  return results;
}

// The loss on every rank and each rank's gradient slice against the dense reference.
void expect_matches_reference(const ChunkProblem& p, const ChunkDistillationOptions& options, int tp, DType dtype,
                              double loss_tol, double grad_tol, Device device = Device::cpu(), bool three_d = false) {
  SCOPED_TRACE("tp " + std::to_string(tp) + ", " + std::string(dtype_name(dtype)) + (three_d ? ", [2, T, V]" : ""));
  const DenseResult ref = dense_reference(p, reference_options(options));
  const auto results = run_at(p, tp, options, dtype, device, three_d);
  ChunkProblem shard = p;
  shard.vocab_local = (p.vocab + tp - 1) / tp;
  for (int rank = 0; rank < tp; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    EXPECT_LE(loss_error(r.loss, ref.loss), loss_tol) << "rank " << rank << ": " << r.loss << " vs " << ref.loss;
    const auto expected = loss_testing::column_slice(ref.grad, shard, rank, 0.0);
    EXPECT_LE(grad_error(r.grad, expected), grad_tol) << "rank " << rank;
  }
}

ChunkDistillationOptions kl_options() {
  return {};
}

ChunkDistillationOptions gold_options(int64_t top = 8192) {
  ChunkDistillationOptions o;
  o.kind = ChunkLossKind::kGold;
  o.gold_uncommon_top = top;
  return o;
}

TEST(ChunkDistillation, ReferenceHasEveryChunkShape) {
  // The problem is what the other tests rely on: 5 valid chunks (1:1, 1:N, N:1, N:M, 2:2), 3 invalid ones.
  const ChunkProblem p = hand_made_problem();
  const DenseResult ref = dense_reference(p, {});
  EXPECT_GT(ref.loss, 0.0);
  const losses::ChunkDistillationResult one = [&] {
    Tensor x = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
    return losses::chunk_distillation_loss(x, Tensor(), p.teacher(), p.chunks(), p.projection());
  }();
  // The default normaliser is the 5 valid chunks: the sum is 5 times the loss.
  ReferenceOptions sum_options;
  sum_options.normalizer = 1.0;
  EXPECT_NEAR(dense_reference(p, sum_options).loss, 5 * ref.loss, 1e-12);
  EXPECT_NEAR(one.kd, ref.loss, 1e-12);
  EXPECT_EQ(losses::valid_chunk_count(p.chunks()), 5);
  const losses::CommonIds from_pairs = losses::common_ids_from_pairs(Tensor::from_ints({3, 4, 6, 8}, {2, 2}));
  EXPECT_EQ(from_pairs.student_ids.to_ints(), (std::vector<int32_t>{3, 6}));
  EXPECT_EQ(from_pairs.teacher_ids.to_ints(), (std::vector<int32_t>{4, 8}));
  // Rows in no valid chunk (s7: student-only chunk, s8: -1) get no gradient.
  for (int64_t j = 0; j < p.vocab; ++j) {
    EXPECT_EQ(ref.grad[7 * p.vocab + j], 0.0);
    EXPECT_EQ(ref.grad[8 * p.vocab + j], 0.0);
  }
}

TEST(ChunkDistillation, ChunkKLMatchesDenseReferenceAtTp124) {
  const ChunkProblem p = hand_made_problem();
  for (int tp : {1, 2, 4}) expect_matches_reference(p, kl_options(), tp, DType::F64, 1e-12, 1e-10);
}

TEST(ChunkDistillation, ChunkKLOnARandomAlignmentAtTp124) {
  const ChunkProblem p = random_problem(40, 97, 131, 6, 21);
  for (int tp : {1, 2, 4}) expect_matches_reference(p, kl_options(), tp, DType::F64, 1e-12, 1e-10);
  // Student logits [batch, positions, V_s / tp]: the rows flattened.
  expect_matches_reference(p, kl_options(), 2, DType::F64, 1e-12, 1e-10, Device::cpu(), true);
  expect_matches_reference(p, gold_options(9), 2, DType::F64, 1e-12, 1e-10, Device::cpu(), true);
}

// Enough chunks (over 8,192 S_c slots) for the plan to be built on worker threads where the machine has two cores
// or more; the result must not depend on how the chunks are split.
TEST(ChunkDistillation, ChunkKLWithAPlanBuiltOnWorkerThreads) {
  const ChunkProblem p = random_problem(1200, 97, 701, 16, 31);
  expect_matches_reference(p, kl_options(), 1, DType::F64, 1e-12, 1e-10);
  expect_matches_reference(p, kl_options(), 2, DType::F64, 1e-12, 1e-10);
}

TEST(ChunkDistillation, ChunkKLCollectivesAreOneMaxAndOnePackedSum) {
  ChunkProblem p = hand_made_problem();
  const auto results = run_at(p, 2, kl_options(), DType::F64);
  for (const RankResult& r : results) {
    ASSERT_EQ(r.forward_calls.size(), 2u);
    EXPECT_EQ(r.forward_calls[0].op, ReduceOp::Max);
    EXPECT_EQ(r.forward_calls[0].shape, (Shape{p.rows + 4}));  // row maxima + the shard check
    EXPECT_EQ(r.forward_calls[1].op, ReduceOp::Sum);
    EXPECT_TRUE(r.backward_calls.empty());
  }
}

TEST(ChunkDistillation, ChunkKLTemperatureNormalizerAndCE) {
  const ChunkProblem p = hand_made_problem(11);
  ChunkDistillationOptions o;
  o.temperature = 2.0;
  o.normalizer = 7.5;
  for (int tp : {1, 2, 4}) expect_matches_reference(p, o, tp, DType::F64, 1e-12, 1e-10);
  o.kd_ratio = 0.7;
  for (int tp : {1, 2, 4}) expect_matches_reference(p, o, tp, DType::F64, 1e-12, 1e-10);
  o.kd_ratio = 1.0;
  o.dynamic_ce_scaling = true;
  o.scale_by_t_squared = false;
  for (int tp : {1, 2, 4}) expect_matches_reference(p, o, tp, DType::F64, 1e-12, 1e-10);
}

TEST(ChunkDistillation, ChunkKLReportsItsParts) {
  const ChunkProblem p = hand_made_problem();
  ChunkDistillationOptions o;
  o.kd_ratio = 0.25;
  Tensor x = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
  const auto r = losses::chunk_distillation_loss(x, Tensor::from_ints(p.labels, {p.rows}), p.teacher(), p.chunks(),
                                                 p.projection(), o);
  ReferenceOptions ro;
  ro.kd_ratio = 0.25;
  const DenseResult ref = dense_reference(p, ro);
  EXPECT_NEAR(r.kd, ref.kd, 1e-12);
  EXPECT_NEAR(r.ce, ref.ce, 1e-12);
  EXPECT_NEAR(r.loss.item(), 0.25 * ref.kd + 0.75 * ref.ce, 1e-12);
}

TEST(ChunkDistillation, ChunkKLF32AndBF16Logits) {
  const ChunkProblem p = hand_made_problem();
  for (int tp : {1, 2}) {
    expect_matches_reference(p, kl_options(), tp, DType::F32, 1e-5, 1e-4);
    expect_matches_reference(p, kl_options(), tp, DType::BF16, 2e-2, 5e-2);
  }
}

// Central differences of the f64 loss against its gradient, every logit.
void expect_finite_differences(const ChunkProblem& p, const ChunkDistillationOptions& o) {
  auto loss_at = [&](const std::vector<double>& x) {
    const Tensor t = Tensor::from_doubles(x, {p.rows, p.vocab}, DType::F64);
    return losses::chunk_distillation_loss(t, Tensor::from_ints(p.labels, {p.rows}), p.teacher(), p.chunks(),
                                           p.projection(), o, p.common())
        .loss.item();
  };
  Tensor x = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
  x.set_requires_grad();
  Tensor loss = losses::chunk_distillation_loss(x, Tensor::from_ints(p.labels, {p.rows}), p.teacher(), p.chunks(),
                                                p.projection(), o, p.common())
                    .loss;
  loss.backward();
  const std::vector<double> grad = x.grad().to_doubles();
  const double h = 1e-6;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < p.logits.size(); ++i) {
    std::vector<double> a = p.logits, b = p.logits;
    a[i] += h;
    b[i] -= h;
    const double fd = (loss_at(a) - loss_at(b)) / (2 * h);
    worst = std::max(worst, std::abs(fd - grad[i]));
    scale = std::max(scale, std::abs(grad[i]));
  }
  EXPECT_LE(worst, 1e-7 * std::max(scale, 1.0)) << "largest |finite difference - gradient|";
}

TEST(ChunkDistillation, ChunkKLFiniteDifferences) {
  const ChunkProblem p = hand_made_problem(3);
  ChunkDistillationOptions o;
  o.temperature = 1.5;
  expect_finite_differences(p, o);
}

TEST(ChunkDistillation, GoldMatchesDenseReferenceAtTp124) {
  const ChunkProblem p = hand_made_problem();
  ASSERT_EQ(p.common_student.size(), 4u);  // V_s - P = 7 uncommon student ids, V_t - P = 9 teacher ones
  for (int64_t top : {8192, 4, 8})
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE("m " + std::to_string(top));
      expect_matches_reference(p, gold_options(top), tp, DType::F64, 1e-12, 1e-10);
    }
}

TEST(ChunkDistillation, GoldOnARandomAlignmentWithCEAndTemperature) {
  const ChunkProblem p = random_problem(40, 97, 131, 6, 23);
  ChunkDistillationOptions o = gold_options(16);
  o.temperature = 1.5;
  o.normalizer = 9.0;
  for (int tp : {1, 2, 4}) expect_matches_reference(p, o, tp, DType::F64, 1e-12, 1e-10);
  o.dynamic_ce_scaling = true;
  for (int tp : {1, 4}) expect_matches_reference(p, o, tp, DType::F64, 1e-12, 1e-10);
  o.dynamic_ce_scaling = false;
  o.kd_ratio = 0.5;
  for (int tp : {1, 2}) expect_matches_reference(p, o, tp, DType::F32, 1e-5, 1e-4);
}

TEST(ChunkDistillation, GoldFiniteDifferences) {
  const ChunkProblem p = hand_made_problem(5);
  ChunkDistillationOptions o = gold_options(5);
  o.temperature = 0.8;
  expect_finite_differences(p, o);
}

TEST(ChunkDistillation, BadInputIsAClearError) {
  const ChunkProblem p = hand_made_problem();
  const Tensor x = Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64);
  auto call = [&](const ChunkProblem& q, const ChunkDistillationOptions& o = {}) {
    return losses::chunk_distillation_loss(x, Tensor(), q.teacher(), q.chunks(), q.projection(), o);
  };
  ChunkProblem bad = p;
  bad.student_chunk[3] = 8;
  EXPECT_THROW(
      {
        try {
          call(bad);
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("chunk_count"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  bad = p;
  bad.vocab = 12;  // a projection made for another student vocabulary
  bad.row_offsets.push_back(bad.row_offsets.back());
  EXPECT_THROW(call(bad), InputError);
  bad = p;
  bad.teacher_ids[1] = bad.teacher_ids[0];  // a repeated id at one position
  EXPECT_THROW(call(bad), InputError);
  ChunkDistillationOptions o;
  o.kd_ratio = 0.5;  // CE without labels
  EXPECT_THROW(call(p, o), InputError);
  // The gold loss without its common pairs, or with a pair repeated.
  EXPECT_THROW(call(p, gold_options()), InputError);
  ChunkProblem repeated = p;
  repeated.common_student.push_back(repeated.common_student[0] + 1);
  repeated.common_teacher.push_back(repeated.common_teacher[0]);
  EXPECT_THROW(losses::chunk_distillation_loss(x, Tensor(), p.teacher(), p.chunks(), p.projection(), gold_options(),
                                               repeated.common()),
               InputError);
}

// ---- CUDA (skipped without a GPU) ----------------------------------------------------------------------------

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

TEST(ChunkDistillationCuda, ChunkKLMatchesDenseReferenceAtTp124) {
  SKIP_WITHOUT_GPU();
  const ChunkProblem p = hand_made_problem();
  ChunkDistillationOptions o;
  for (int tp : {1, 2, 4}) {
    expect_matches_reference(p, o, tp, DType::F32, 1e-5, 1e-4, Device::cuda(0));
    expect_matches_reference(p, o, tp, DType::BF16, 2e-2, 5e-2, Device::cuda(0));
  }
  o.temperature = 2.0;
  o.kd_ratio = 0.6;
  for (int tp : {1, 2}) expect_matches_reference(p, o, tp, DType::F32, 1e-5, 1e-4, Device::cuda(0));
}

// The CUDA passes against the CPU ones on a realistic alignment (chunks of 1 to 3 positions each side), wide rows.
void expect_cuda_matches_cpu(const ChunkDistillationOptions& o) {
  const ChunkProblem p = random_problem(96, 3001, 3203, 16, 5);
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const auto cpu = run_at(p, tp, o, DType::F32, Device::cpu());
    const auto gpu = run_at(p, tp, o, DType::F32, Device::cuda(0));
    const auto gpu_bf16 = run_at(p, tp, o, DType::BF16, Device::cuda(0));
    const auto cpu_bf16 = run_at(p, tp, o, DType::BF16, Device::cpu());
    for (int r = 0; r < tp; ++r) {
      EXPECT_LE(loss_error(gpu[r].loss, cpu[r].loss), 1e-5);
      EXPECT_LE(grad_error(gpu[r].grad, cpu[r].grad), 1e-4);
      EXPECT_LE(loss_error(gpu_bf16[r].loss, cpu_bf16[r].loss), 1e-4);
      EXPECT_LE(grad_error(gpu_bf16[r].grad, cpu_bf16[r].grad), 2e-2);
    }
  }
}

TEST(ChunkDistillationCuda, ChunkKLMatchesCpuOnARealisticAlignment) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu(kl_options());
}

TEST(ChunkDistillationCuda, GoldMatchesDenseReferenceAtTp124) {
  SKIP_WITHOUT_GPU();
  const ChunkProblem p = hand_made_problem();
  for (int64_t top : {8192, 4, 8})
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE("m " + std::to_string(top));
      expect_matches_reference(p, gold_options(top), tp, DType::F32, 1e-5, 1e-4, Device::cuda(0));
      expect_matches_reference(p, gold_options(top), tp, DType::BF16, 2e-2, 5e-2, Device::cuda(0));
    }
  ChunkDistillationOptions o = gold_options(6);
  o.temperature = 1.5;
  o.kd_ratio = 0.5;
  for (int tp : {1, 2}) expect_matches_reference(p, o, tp, DType::F32, 1e-5, 1e-4, Device::cuda(0));
}

TEST(ChunkDistillationCuda, GoldMatchesCpuOnARealisticAlignment) {
  SKIP_WITHOUT_GPU();
  // m below and above the shard's uncommon ids (the local top m then takes them all).
  expect_cuda_matches_cpu(gold_options(64));
  expect_cuda_matches_cpu(gold_options(4000));
}

}  // namespace
}  // namespace retort::chunk_testing
