// Off-policy distillation: the cache rows a student batch gets (across token shards whose windows the
// teacher cut elsewhere), the errors of a cache that does not match the student's run, and a tiny end-to-end
// distillation (teacher trained, cache written, student trained from it, and the online reference) whose KD loss
// goes down.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "core/config/config.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/token_shard.h"
#include "core/tensor/device.h"
#include "core/util/error.h"
#include "distill/cache/cache_targets.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/cache/teacher_topk.h"
#include "distill/distill_config.h"
#include "distill/distill_training.h"
#include "distill/train/config_builders.h"
#include "distill/train/evaluation.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "tests/distill/distill_run_support.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::read_metrics;
using testing::resolve_distill;
using testing::small_run_overrides;
using testing::student_overrides;
using testing::teacher_with_cache;

constexpr int64_t kVocab = 40;
constexpr int64_t kSeq = 8;
constexpr int kK = 6;

// A teacher whose next-token logits depend on the current token alone, so a row does not depend on where the
// teacher's window starts: logit(token, v), a fixed random table.
double fake_logit(int32_t token, int64_t v) {
  static const std::vector<double> table = [] {
    std::mt19937 gen(7);
    std::normal_distribution<double> normal(0.0, 2.0);
    std::vector<double> values(static_cast<size_t>(kVocab * kVocab));
    for (auto& x : values) x = static_cast<float>(normal(gen));
    return values;
  }();
  return table[static_cast<size_t>(token * kVocab + v)];
}

// float64 log-softmax of the fake teacher after `token`.
std::vector<double> fake_logprobs(int32_t token) {
  std::vector<double> l(kVocab);
  double m = -INFINITY;
  for (int64_t v = 0; v < kVocab; ++v) m = std::max(m, l[v] = fake_logit(token, v));
  double s = 0;
  for (double x : l) s += std::exp(x - m);
  for (double& x : l) x -= m + std::log(s);
  return l;
}

struct FakeCache {
  fs::path dir;
  std::vector<fs::path> shards;
  std::vector<int32_t> stream;  // every shard's tokens, in order
  CacheRequirements need;
};

// Two token shards whose lengths are not multiples of kSeq (the student's windows restart at the second shard,
// the teacher's run on across it) and their f32 cache, written by generate_teacher_topk at seq_len kSeq.
FakeCache make_fake_cache(const std::string& name) {
  FakeCache c;
  c.dir = fresh_dir(name);
  fs::create_directories(c.dir);
  std::mt19937 gen(3);
  for (int64_t size : {45, 42}) {
    std::vector<int32_t> tokens(static_cast<size_t>(size));
    for (auto& t : tokens) t = static_cast<int32_t>(gen() % kVocab);
    c.shards.push_back(c.dir / fmt::format("train_{:03d}.bin", c.shards.size()));
    data::write_token_shard(c.shards.back(), tokens, kVocab);
    c.stream.insert(c.stream.end(), tokens.begin(), tokens.end());
  }
  distill::TeacherTopKOptions options;
  options.k = kK;
  options.dtype = distill::CacheValueType::F32;
  options.batch_size = 3;
  options.seq_len = kSeq;
  options.output_dir = c.dir / "cache";
  options.shard_tokens = 16;
  options.tokenizer_id = "fake-tokenizer";
  options.vocab = kVocab;
  const auto teacher = [](const Tensor& tokens) {
    const std::vector<int32_t> ids = tokens.to_ints();
    std::vector<float> logits;
    for (int32_t id : ids)
      for (int64_t v = 0; v < kVocab; ++v) logits.push_back(static_cast<float>(fake_logit(id, v)));
    return Tensor::from_floats(logits, {tokens.size(0), tokens.size(1), kVocab});
  };
  distill::generate_teacher_topk(teacher, {c.shards, kVocab}, options);
  std::ofstream(options.output_dir / "teacher.json") << R"({"temperature": 1.0})";
  c.need.k = kK;
  c.need.tokenizer_id = "fake-tokenizer";
  c.need.vocab_size = kVocab;
  c.need.dataset = token_stream_identity(c.shards, kVocab);
  c.need.temperature = 1.0;
  return c;
}

TEST(DistillCacheRows, EveryBatchGetsTheTeacherRowsOfItsOwnPositions) {
  const FakeCache c = make_fake_cache("distill_rows");
  const distill::TopKCacheReader cache = open_matching_cache(c.dir / "cache", c.need);
  ASSERT_EQ(cache.tokens(), (45 + 42) / kSeq * kSeq);  // the teacher's windows run across the shard boundary
  data::TokenLoader loader(c.shards, kVocab, {2, kSeq, data::LoaderMode::kTrain, 11, 0, 1, 0});
  int64_t checked = 0, masked = 0;
  // Two epochs: every window of both shards, in shuffled order.
  for (int64_t step = 0; step < 2 * loader.batches_per_epoch(); ++step) {
    const data::TokenBatch batch = loader.next();
    const losses::TopkTargets targets = cache_targets_for_batch(cache, batch);
    ASSERT_EQ(targets.indices.shape(), (Shape{2, kSeq, kK}));
    const std::vector<int32_t> ids = targets.indices.to_ints(), mask = targets.mask.to_ints();
    const std::vector<int32_t> labels = targets.labels.to_ints();
    const std::vector<float> values = targets.logprobs.to_floats();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < kSeq; ++t) {
        const int64_t row = b * kSeq + t, position = batch.window_starts[b] + t;
        // The position is the stream position of this input token.
        ASSERT_EQ(c.stream[static_cast<size_t>(position)], batch.inputs[static_cast<size_t>(row)]);
        EXPECT_EQ(labels[static_cast<size_t>(row)], batch.targets[static_cast<size_t>(row)]);
        if (position >= cache.tokens()) {
          EXPECT_EQ(mask[static_cast<size_t>(row)], 0) << "a position past the cache must be masked";
          ++masked;
          continue;
        }
        EXPECT_EQ(mask[static_cast<size_t>(row)], 1);
        // The teacher's top-k after this input token, from the float64 reference.
        const std::vector<double> reference = fake_logprobs(batch.inputs[static_cast<size_t>(row)]);
        std::vector<int> order(kVocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int z) { return reference[a] > reference[z]; });
        for (int j = 0; j < kK; ++j) {
          ASSERT_EQ(ids[static_cast<size_t>(row * kK + j)], order[j]) << "row " << row << " entry " << j;
          EXPECT_NEAR(values[static_cast<size_t>(row * kK + j)], reference[order[j]], 2e-5);
        }
        ++checked;
      }
    }
  }
  // Windows of the second shard sit at stream positions that are not multiples of kSeq, and its last window ends
  // past the cache: both cases were seen.
  EXPECT_GT(checked, 0);
  EXPECT_GT(masked, 0);
}

TEST(DistillCacheRows, ACacheOfAnotherRunIsAnError) {
  const FakeCache c = make_fake_cache("distill_mismatch");
  const auto expect_error = [&](CacheRequirements need, const std::string& fragment) {
    try {
      open_matching_cache(c.dir / "cache", need);
      ADD_FAILURE() << "a mismatched cache must not open (" << fragment << ")";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  CacheRequirements need = c.need;
  need.k = kK + 2;
  expect_error(need, "holds k = 6 entries per token, the run asks for k = 8: set distill.k=6");
  need = c.need;
  need.tokenizer_id = "another-tokenizer";
  expect_error(need, "another-tokenizer");
  need = c.need;
  need.dataset.hash ^= 1;
  expect_error(need, "generate the cache for this dataset");
  need = c.need;
  need.vocab_size = kVocab * 2;
  expect_error(need, "vocabulary of 40 but the student's is 80");
  need = c.need;
  need.temperature = 2.0;
  expect_error(need, "written at temperature 1 but distill.temperature is 2");
  // The matching requirements open it; a folder without a cache is an error that says how to write one.
  EXPECT_EQ(open_matching_cache(c.dir / "cache", c.need).k(), kK);
  try {
    open_matching_cache(c.dir / "no_cache", c.need);
    ADD_FAILURE() << "a missing cache must be an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("retort distill topk"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace retort::distill

namespace retort::distill {
namespace {

double mean_of(const std::vector<nlohmann::json>& records, size_t begin, size_t end, const std::string& key) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += records.at(i).at(key).get<double>();
  return sum / static_cast<double>(end - begin);
}

TEST(DistillEndToEnd, TeacherCacheAndStudentsWhoseKdLossGoesDown) {
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_e2e");
  const auto student_keys = student_overrides(root, out / "student");
  const ResolvedConfig student = resolve_distill(student_keys);

  // The student's first batch gets the teacher's own log-probabilities of exactly those tokens: the teacher run
  // here on the batch's inputs, log-softmax in float64.
  {
    const data::PreparedDataset dataset = data::prepare_token_dataset(dataset_options_from(student));
    ASSERT_EQ(dataset.train_shards.size(), 1u);
    CacheRequirements need;
    need.k = 8;
    need.tokenizer_id = dataset.tokenizer_fingerprint;
    need.vocab_size = dataset.vocab_size;
    need.dataset = token_stream_identity(dataset.train_shards, dataset.vocab_size);
    const distill::TopKCacheReader cache = open_matching_cache(root / "cache", need);
    data::TokenLoader loader(
        dataset.train_shards, dataset.vocab_size,
        {8, 16, data::LoaderMode::kTrain, static_cast<uint64_t>(student.get_int("run.seed")), 0, 1, 0});
    const data::TokenBatch batch = loader.next();
    const losses::TopkTargets targets = cache_targets_for_batch(cache, batch);
    const TrainedModel teacher = load_trained_model(root / "teacher", Device::cpu());
    const std::vector<float> logits = inference_logits(teacher, Tensor::from_ints(batch.inputs, {8, 16})).to_floats();
    const std::vector<int32_t> ids = targets.indices.to_ints();
    const std::vector<float> values = targets.logprobs.to_floats();
    const int64_t V = dataset.vocab_size;
    for (int64_t row = 0; row < 8 * 16; ++row) {
      const auto first = logits.begin() + row * V;
      const double m = *std::max_element(first, first + V);
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(first[v]) - m);
      const double lse = m + std::log(s);
      EXPECT_EQ(ids[static_cast<size_t>(row * 8)], std::max_element(first, first + V) - first) << "row " << row;
      for (int j = 0; j < 8; ++j)
        EXPECT_NEAR(values[static_cast<size_t>(row * 8 + j)], first[ids[static_cast<size_t>(row * 8 + j)]] - lse, 1e-4)
            << "row " << row << " entry " << j;
    }
  }

  // Cache mode, then the online reference; both report the KD loss and the labels' cross-entropy, and the KD
  // loss of the last steps is well below that of the first.
  for (const std::string mode : {"cache", "online"}) {
    auto overrides = student_keys;
    overrides.push_back("distill.mode=" + mode);
    overrides.push_back("run.dir=" + (out / ("student_" + mode)).string());
    const TrainResult result = run_distill_training(resolve_distill(overrides), Device::cpu(), false);
    EXPECT_EQ(result.steps, 24);
    const auto records = read_metrics(out / ("student_" + mode));
    ASSERT_EQ(records.size(), 24u);
    ASSERT_TRUE(records[0].contains("kd") && records[0].contains("ce")) << records[0].dump();
    const double early = mean_of(records, 0, 4, "kd"), late = mean_of(records, 20, 24, "kd");
    EXPECT_LT(late, 0.8 * early) << mode << ": KD loss " << early << " -> " << late;
    EXPECT_LT(mean_of(records, 20, 24, "ce"), mean_of(records, 0, 4, "ce")) << mode;
  }

  // The evaluation of a student against its teacher.
  const TrainedModel teacher = load_trained_model(root / "teacher", Device::cpu());
  const TrainedModel kd_student = load_trained_model(out / "student_cache", Device::cpu());
  const EvalReport eval =
      evaluate_model(kd_student, run_validation_shards(out / "student_cache"), {8, 16, 0}, &teacher);
  EXPECT_GT(eval.tokens, 0);
  EXPECT_NEAR(eval.perplexity, std::exp(eval.loss), 1e-9 * eval.perplexity);
  ASSERT_TRUE(eval.kl_to_teacher && eval.top1_agreement);
  EXPECT_GT(*eval.kl_to_teacher, 0);
  EXPECT_GE(*eval.top1_agreement, 0);
  EXPECT_LE(*eval.top1_agreement, 1);
}

TEST(DistillEndToEnd, CudaStudentsFollowTheCpuStudents) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_cuda");
  for (const std::string mode : {"cache", "online"}) {
    std::vector<double> losses[2];
    for (int gpu = 0; gpu < 2; ++gpu) {
      auto overrides = student_overrides(root, out / (mode + (gpu ? "_gpu" : "_cpu")));
      overrides.push_back("distill.mode=" + mode);
      losses[gpu] =
          run_distill_training(resolve_distill(overrides), gpu ? Device::cuda(0) : Device::cpu(), false).train_losses;
    }
    ASSERT_EQ(losses[0].size(), losses[1].size());
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * std::abs(losses[0][i]) + 1e-4) << mode << " step " << i + 1;
  }
}

// distill.cache_kind=sampled end to end: the sampled cache of the shared teacher, then a student trained from it
// whose KD loss and cross-entropy go down; a top-k run pointed at that cache is refused with the key to set.
std::vector<std::string> sampled_student_overrides(const fs::path& root, const fs::path& cache, const fs::path& run) {
  auto overrides = student_overrides(root, run);
  overrides.insert(overrides.end(), {"distill.cache_kind=sampled", "distill.sample_k=12",
                                     "distill.sample_temperature=1.5", "distill.cache_dir=" + cache.string()});
  return overrides;
}

TEST(DistillEndToEnd, ASampledCacheTrainsAStudent) {
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_sampled");
  const auto keys = sampled_student_overrides(root, out / "cache", out / "student");
  const distill::TeacherTopKReport report = write_teacher_cache(resolve_distill(keys), Device::cpu());
  EXPECT_GT(report.cache_tokens, 0);
  EXPECT_EQ(read_cache_info(out / "cache").value("kind", std::string()), "sampled");
  const TrainResult result = run_distill_training(resolve_distill(keys), Device::cpu(), false);
  EXPECT_EQ(result.steps, 24);
  const auto records = read_metrics(out / "student");
  ASSERT_EQ(records.size(), 24u);
  const double early = mean_of(records, 0, 4, "kd"), late = mean_of(records, 20, 24, "kd");
  EXPECT_LT(late, 0.8 * early) << "KD loss " << early << " -> " << late;
  EXPECT_LT(mean_of(records, 20, 24, "ce"), mean_of(records, 0, 4, "ce"));

  // Writing into that folder with another seed would mix two sets of draws: refused before any work.
  auto reseeded = keys;
  reseeded.push_back("distill.sample_seed=7");
  try {
    write_teacher_cache(resolve_distill(reseeded), Device::cpu());
    ADD_FAILURE() << "a sampled cache was continued with another seed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sample_seed = 0, the run asks for distill.sample_seed = 7"),
              std::string::npos)
        << e.what();
  }

  auto topk = keys;
  topk.push_back("distill.cache_kind=topk");
  topk.push_back("run.dir=" + (out / "topk_student").string());
  try {
    run_distill_training(resolve_distill(topk), Device::cpu(), false);
    ADD_FAILURE() << "a top-k run read a sampled cache";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is a sampled cache"), std::string::npos) << what;
    EXPECT_NE(what.find("set distill.cache_kind=sampled"), std::string::npos) << what;
  }
}

TEST(DistillEndToEnd, CudaSampledStudentFollowsTheCpuStudent) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_sampled_cuda");
  write_teacher_cache(resolve_distill(sampled_student_overrides(root, out / "cache", out / "unused")), Device::cpu());
  std::vector<double> losses[2];
  for (int gpu = 0; gpu < 2; ++gpu) {
    const auto keys = sampled_student_overrides(root, out / "cache", out / (gpu ? "gpu" : "cpu"));
    losses[gpu] =
        run_distill_training(resolve_distill(keys), gpu ? Device::cuda(0) : Device::cpu(), false).train_losses;
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * std::abs(losses[0][i]) + 1e-4) << "step " << i + 1;
}

// `retort distill train --resume` continues exactly where the run stopped, for a student of the cache and of an
// online teacher: a run stopped by a NaN at step 12 and resumed from its step-8 checkpoint logs the same loss, KD
// part and cross-entropy, bit for bit, as the run that was never stopped.
TEST(DistillResume, AStoppedStudentResumesBitIdentically) {
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_resume");
  for (const std::string mode : {"cache", "online"}) {
    auto keys = [&](const std::string& name) {
      auto overrides = student_overrides(root, out / (name + "_" + mode));
      overrides.insert(overrides.end(), {"distill.mode=" + mode, "train.checkpoint_every=8"});
      return overrides;
    };
    run_distill_training(resolve_distill(keys("straight")), Device::cpu(), false);
    auto broken = keys("interrupted");
    broken.push_back("train.inject_nan_at_step=11");
    EXPECT_THROW(run_distill_training(resolve_distill(broken), Device::cpu(), false), Error);
    const TrainResult resumed = run_distill_training(resolve_distill(keys("interrupted")), Device::cpu(), true);
    EXPECT_EQ(resumed.steps, 24);
    EXPECT_EQ(resumed.train_losses.size(), 16u) << mode << ": resumed from the step-8 checkpoint";
    const auto a = read_metrics(out / ("straight_" + mode)), b = read_metrics(out / ("interrupted_" + mode));
    ASSERT_EQ(a.size(), 24u) << mode;
    ASSERT_EQ(b.size(), 24u) << mode << ": metrics.jsonl holds each step once after a resume";
    for (size_t i = 0; i < a.size(); ++i) {
      for (const char* key : {"loss", "kd", "ce", "lr"})
        EXPECT_EQ(a[i].at(key).get<double>(), b[i].at(key).get<double>()) << mode << " step " << i + 1 << " " << key;
    }
  }
}

TEST(DistillConfig, ShippedConfigResolves) {
  Config config = Config::load(fs::path(RETORT_SOURCE_DIR) / "configs" / "distill-toy.yaml");
  const ResolvedConfig resolved = config.resolve(distill_schema());
  EXPECT_EQ(resolved.get_string("distill.mode"), "cache");
  EXPECT_LT(resolved.get_int("model.n_embd"), resolved.get_int("teacher.n_embd"));
  // Every path of the pipeline follows run.dir.
  EXPECT_EQ(teacher_run_dir(resolved), fs::path("runs/distill-toy/teacher"));
  EXPECT_EQ(cache_dir(resolved), fs::path("runs/distill-toy/teacher_topk"));
  EXPECT_FALSE(has_external_teacher(resolved));
  EXPECT_GT(resolved.get_int("teacher.checkpoint_every"), 0) << "an interrupted teacher resumes from a checkpoint";
}

TEST(DistillEndToEnd, AStudentOfAnotherTokenizerIsRejected) {
  const fs::path root = fresh_dir("distill_tokenizer");
  auto teacher_overrides = small_run_overrides(root / "teacher");
  teacher_overrides.push_back("train.steps=1");
  run_label_training(resolve_distill(teacher_overrides), Device::cpu(), false);
  // Another vocabulary size is another tokenizer (and another data folder).
  auto student = small_run_overrides(root / "student");
  student.insert(student.end(), {"data.vocab_size=400", "data.dir=" + (root / "data400").string(),
                                 "distill.teacher=" + (root / "teacher").string(),
                                 "distill.cache_dir=" + (root / "cache").string(), "distill.mode=online"});
  try {
    run_distill_training(resolve_distill(student), Device::cpu(), false);
    FAIL() << "a teacher of another tokenizer must be rejected";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("same data.dir and data.vocab_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace retort::distill
